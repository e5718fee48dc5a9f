#include "backend/cuda/runner/pass_buffers.h"

#include "planning/device_memory_plan.h"

namespace nt {

PassBuffers::PassBuffers(const ModelSpec& c, int64_t max_batch, int64_t context, int multiprocessors, bool has_head) {
  const ActivationLayout a = layout_activations(c, max_batch, context, multiprocessors, has_head);
  buffer = DeviceBuffer(a.total, "activation buffers");
  auto* base = buffer.as<uint8_t>();
  const auto at = [&](uint64_t offset) { return static_cast<void*>(base + offset); };
  pos = static_cast<int32_t*>(at(a.inputs));
  top_k = pos + 1;
  tokens = pos + kInputsHeader;
  x = static_cast<float*>(at(a.x));
  xn = static_cast<float*>(at(a.xn));
  qkv = static_cast<float*>(at(a.qkv));
  att = static_cast<float*>(at(a.att));
  gate = static_cast<float*>(at(a.gate));
  up = static_cast<float*>(at(a.up));
  h = static_cast<float*>(at(a.h));
  logits = has_head ? static_cast<float*>(at(a.logits)) : nullptr;
  partials = a.partial_floats ? static_cast<float*>(at(a.partials)) : nullptr;
  q8 = static_cast<int8_t*>(at(a.q8));
  q8_scales = static_cast<float2*>(at(a.q8_scales));
  norm_q8 = static_cast<int8_t*>(at(a.norm_q8));
  norm_q8_scales = static_cast<float2*>(at(a.norm_q8_scales));
  norm_sumsq = static_cast<float*>(at(a.norm_sumsq));
  f16 = static_cast<uint16_t*>(at(a.f16));
  argmax = static_cast<int32_t*>(at(a.argmax));
  argmax_scratch = at(a.argmax_scratch);
  top = static_cast<TopLogit*>(at(a.top));
  top_poisoned = reinterpret_cast<int32_t*>(top + kMaxTopLogits);
  top_scratch = at(a.top_scratch);
}

}  // namespace nt

// The device buffers a forward pass works in, in one allocation laid out by
// layout_activations (planning/device_memory_plan.h, which the memory plan
// counts too): the pass's inputs, the hidden state and its intermediates,
// their q8 and f16 forms, the logits and what the GPU picks from them.
#pragma once

#include <cstdint>

#include "backend/cuda/device_buffer.h"
#include "backend/cuda/kernels/top_logits.h"
#include "model/arch/model_spec.h"

namespace nt {

struct PassBuffers {
  PassBuffers() = default;
  // For chunks of up to max_batch tokens; without the head (a pipeline
  // stage before the last) there are no logits rows.
  PassBuffers(const ModelSpec& c, int64_t max_batch, int64_t context, int multiprocessors, bool has_head);

  DeviceBuffer buffer;
  // The inputs (kInputsHeader, as staged on the host): the position, top_k, then the tokens.
  int32_t* pos = nullptr;
  int32_t* top_k = nullptr;
  int32_t* tokens = nullptr;
  float *x = nullptr, *xn = nullptr, *qkv = nullptr, *att = nullptr, *gate = nullptr, *up = nullptr, *h = nullptr,
        *logits = nullptr, *partials = nullptr;
  int8_t* q8 = nullptr;
  float2* q8_scales = nullptr;
  // The input of the next RMSNorm when decode folds it into the mat-vecs.
  int8_t* norm_q8 = nullptr;
  float2* norm_q8_scales = nullptr;
  float* norm_sumsq = nullptr;
  uint16_t* f16 = nullptr;
  int32_t* argmax = nullptr;  // one per head row
  void* argmax_scratch = nullptr;
  TopLogit* top = nullptr;          // top_logits' output, then
  int32_t* top_poisoned = nullptr;  // its poisoned index
  void* top_scratch = nullptr;
};

}  // namespace nt

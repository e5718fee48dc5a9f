#include "runtime/expert_plan.h"

#include <algorithm>

#include "core/error.h"
#include "runtime/device_layout.h"

namespace nt {

ExpertLayout expert_layout(const ModelSpec& spec, const LayerWeights& layer, int64_t l) {
  using enum LayerRole;
  ExpertLayout t;
  t.gate = layer[FfnGateExperts].type;
  t.up = layer[FfnUpExperts].type;
  t.down = layer[FfnDownExperts].type;
  t.width = spec.layers[size_t(l)].moe.expert_ffn_dim;
  t.dim = spec.dim;
  t.up_at = device_matrix_bytes(t.gate, t.width, t.dim);  // throws for formats the GPU lacks
  t.down_at = t.up_at + device_matrix_bytes(t.up, t.width, t.dim);
  t.bytes = t.down_at + device_matrix_bytes(t.down, t.dim, t.width);
  return t;
}

ExpertPlan plan_experts(const ModelSpec& spec, const ModelWeights& weights, uint64_t vram_bytes, int64_t max_slots) {
  const int64_t per_layer = spec.layers.at(0).moe.n_experts;
  ExpertPlan p;
  for (int64_t l = 0; l < spec.n_layers; ++l) {
    const MoeSpec& moe = spec.layers[size_t(l)].moe;
    if (moe.n_experts != per_layer) {
      fail("layer {} has {} experts and layer 0 {}: the GPU runs mixtures of experts with the same experts in every layer",
           l, moe.n_experts, per_layer);
    }
    const ExpertLayout t = expert_layout(spec, weights.layers[size_t(l)], l);
    p.slot_bytes = std::max(p.slot_bytes, t.bytes);
    p.used_bytes_per_token += uint64_t(moe.n_experts_used) * t.bytes;
  }
  p.experts = spec.n_layers * per_layer;
  int64_t room = int64_t(vram_bytes / p.slot_bytes);
  if (max_slots > 0) room = std::min(room, max_slots);
  p.slots = std::min(room, p.experts);
  if (p.slots < 1) {
    fail("the experts need at least one expert's {:.1f} MiB of VRAM beside the rest of the model, but the budget leaves "
         "{:.1f} MiB (raise --vram-budget, or lower -c)",
         double(p.slot_bytes) / double(1 << 20), double(vram_bytes) / double(1 << 20));
  }
  return p;
}

}  // namespace nt

#include "planning/expert_plan.h"

#include <algorithm>
#include <numeric>

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

uint64_t expert_file_bytes(const LayerWeights& layer, std::span<const LayerRole> roles) {
  uint64_t bytes = 0;
  for (const LayerRole role : roles) {
    if (layer.has(role)) bytes += layer[role].bytes() / uint64_t(layer[role].experts);
  }
  return bytes;
}

void split_misses(std::vector<std::pair<int64_t, int32_t>>& misses, const MissCosts& costs, ExpertMisses policy,
                  std::vector<int32_t>& on_cpu, std::vector<int32_t>& on_link) {
  std::sort(misses.begin(), misses.end());  // the CPU's cost grows with the rows, the link's does not
  double link = costs.copy_seconds * double(misses.size()), cpu = 0;
  for (const auto& [rows, e] : misses) {
    const double here = costs.cpu_seconds(rows);
    if (policy == ExpertMisses::Cpu || (policy == ExpertMisses::Auto && cpu + here <= link - costs.copy_seconds)) {
      on_cpu.push_back(e);
      cpu += here;
      link -= costs.copy_seconds;
    } else {
      on_link.push_back(e);
    }
  }
}

std::vector<int64_t> experts_in_vram(const ExpertPlan& plan, int64_t n_layers, std::span<const uint64_t> counts) {
  std::vector<int64_t> experts(size_t(plan.experts));
  std::iota(experts.begin(), experts.end(), 0);
  if (counts.empty()) {
    const int64_t per_layer = plan.experts / n_layers;
    for (int64_t s = 0; s < plan.slots; ++s) experts[size_t(s)] = (s % n_layers) * per_layer + s / n_layers;
  } else {
    if (int64_t(counts.size()) != plan.experts) fail("{} expert counts for {} experts", counts.size(), plan.experts);
    std::stable_sort(experts.begin(), experts.end(), [&](int64_t a, int64_t b) { return counts[size_t(a)] > counts[size_t(b)]; });
  }
  experts.resize(size_t(plan.slots));
  return experts;
}

double counted_share(std::span<const uint64_t> counts, std::span<const int64_t> experts) {
  uint64_t all = 0, held = 0;
  for (const uint64_t c : counts) all += c;
  for (const int64_t x : experts) held += counts[size_t(x)];
  return all ? double(held) / double(all) : 0.0;
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
    const LayerWeights& lw = weights.layers[size_t(l)];
    p.file_bytes += uint64_t(per_layer) * expert_file_bytes(lw);
    p.landing_bytes = std::max(p.landing_bytes, expert_file_bytes(lw, kExpertMatrices));
  }
  p.experts = spec.n_layers * per_layer;
  int64_t room = int64_t(vram_bytes / p.slot_bytes);
  if (room < p.experts) room = vram_bytes > p.landing_bytes ? int64_t((vram_bytes - p.landing_bytes) / p.slot_bytes) : 0;
  if (max_slots > 0) room = std::min(room, max_slots);
  p.slots = std::min(room, p.experts);
  if (p.slots < 1) {
    fail("the experts need at least one expert's {:.1f} MiB of VRAM, and {:.1f} MiB where a miss lands, beside the rest "
         "of the model, but the budget leaves {:.1f} MiB (raise --vram-budget, or lower -c)",
         double(p.slot_bytes) / double(1 << 20), double(p.landing_bytes) / double(1 << 20),
         double(vram_bytes) / double(1 << 20));
  }
  return p;
}

}  // namespace nt

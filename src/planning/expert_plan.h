// How many of a mixture of experts' experts the GPU holds, as plain host
// arithmetic: the CUDA runner's ExpertStore allocates from these numbers and
// `ntransformer plan` prints them, so the two cannot disagree.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "model/arch/model_spec.h"
#include "model/model_weights.h"

namespace nt {

// One layer's expert (gate, up and down) in the CUDA device layout, each
// matrix from the start of the last one's planes.
struct ExpertLayout {
  TensorType gate{}, up{}, down{};
  int64_t width = 0, dim = 0;  // gate and up: width x dim; down: dim x width
  uint64_t up_at = 0, down_at = 0, bytes = 0;
};

ExpertLayout expert_layout(const ModelSpec& spec, const LayerWeights& layer, int64_t l);

// The roles of a layer's stacked experts: their matrices, then their biases where the mixture has them.
inline constexpr std::array<LayerRole, 3> kExpertMatrices{LayerRole::FfnGateExperts, LayerRole::FfnUpExperts,
                                                          LayerRole::FfnDownExperts};
inline constexpr std::array<LayerRole, 6> kExpertRoles{LayerRole::FfnGateExperts,     LayerRole::FfnUpExperts,
                                                       LayerRole::FfnDownExperts,     LayerRole::FfnGateExpertsBias,
                                                       LayerRole::FfnUpExpertsBias,   LayerRole::FfnDownExpertsBias};

// One expert's bytes in the file: its share of each stacked tensor of `roles` the layer has.
uint64_t expert_file_bytes(const LayerWeights& layer, std::span<const LayerRole> roles = kExpertRoles);

// Where the experts that miss the VRAM cache compute: split between copies
// over the link and the CPU's work from their pinned copy by the two's
// measured rates (Auto), or all copied (Link), or all on the CPU (Cpu).
enum class ExpertMisses { Auto, Link, Cpu };

// What a layer's misses cost on either side: an expert's copy over the link,
// and the CPU's work on an expert over m rows, one row's time and a share of
// it for each further row (its integer kernels read a weight block once for
// all rows).
struct MissCosts {
  double copy_seconds = 0;
  double cpu_row_seconds = 0;
  double extra_row_share = 0.25;
  double cpu_seconds(int64_t rows) const { return cpu_row_seconds * (1.0 + extra_row_share * double(rows - 1)); }
};

// Which of a layer's misses, (rows, expert) each, the CPU computes, the rest
// copied: with Auto the fewest rows first (then the lower expert) as long as
// the CPU's time for them stays within the link's for the rest, so that both
// finish together; with Cpu all of them; with Link none. Sorts `misses`;
// appends to on_cpu and on_link.
void split_misses(std::vector<std::pair<int64_t, int32_t>>& misses, const MissCosts& costs, ExpertMisses policy,
                  std::vector<int32_t>& on_cpu, std::vector<int32_t>& on_link);

struct ExpertPlan {
  int64_t experts = 0;      // every layer's
  int64_t slots = 0;        // held in VRAM
  uint64_t slot_bytes = 0;  // the largest layer's expert
  uint64_t used_bytes_per_token = 0;  // the experts a token reads (k a layer, each layer's own size)
  uint64_t file_bytes = 0;     // every expert's matrices and biases as the file lays them out
  uint64_t landing_bytes = 0;  // the largest expert's matrices in the file's layout: a miss lands there before its re-lay

  bool all_resident() const { return slots == experts; }
  // The slots, and the landing buffer when they cache only some.
  uint64_t vram_bytes() const { return uint64_t(slots) * slot_bytes + (all_resident() ? 0 : landing_bytes); }
  // Every expert in pinned RAM in the file's layout, when VRAM caches only
  // some: what a miss copies from and what the CPU computes from.
  uint64_t pinned_bytes() const { return all_resident() ? 0 : file_bytes; }
  // The share of a token's expert reads that finds them in VRAM when routing
  // is uniform (random weights; the worst case of a cache).
  double uniform_hit_rate() const { return experts ? double(slots) / double(experts) : 1.0; }
};

// The experts a partial placement starts with in VRAM, as indices layer *
// experts_per_layer + expert: the plan.slots most chosen by `counts`
// (calibrate-experts', in that indexing; ties to the lower index), or
// without counts an equal share of every layer's first experts.
std::vector<int64_t> experts_in_vram(const ExpertPlan& plan, int64_t n_layers, std::span<const uint64_t> counts);

// The share of the counted choices that fall on `experts`.
double counted_share(std::span<const uint64_t> counts, std::span<const int64_t> experts);

// The experts of every layer of `spec` within vram_bytes and at most
// max_slots of them (0: no limit); when not all fit, the landing buffer
// comes out of vram_bytes first. Fails when every layer is not a mixture of
// the same number of experts (the GPU's layout), or the budget holds none.
ExpertPlan plan_experts(const ModelSpec& spec, const ModelWeights& weights, uint64_t vram_bytes, int64_t max_slots = 0);

}  // namespace nt

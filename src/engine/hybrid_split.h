// The hybrid split a CUDA run takes: how many of the RAM-tier layers the CPU
// computes in place, up to how many tokens a pass may have for the CPU to
// still pay for all of them, and how many of them it takes in wider passes
// (the rest stream like the other layers). The count
// is given (--cpu-layers N) or chosen by the four-tier planner
// (planning/hybrid_plan.h) from rates measured now: the link and the CPU on
// this model's own layers, timed together as a split runs them, and storage
// when layers stream from it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "gguf/gguf_file.h"
#include "planning/hybrid_plan.h"

namespace nt {

struct HybridSplit {
  int64_t cpu_layers = 0;
  CpuPassPlan passes;    // all of them up to passes.all_up_to tokens, then a share (plan_cpu_passes)
  std::string summary;   // what was measured and predicted, for the log
};

// GPU slots of the streamed-layer ring when the CPU computes layers:
// Tuning::hybrid_ring_slots (3, or 2 to 8 for A/B runs).
int hybrid_ring_slots();

// Passes of 1 to this many tokens are weighed for the CPU's shares.
inline constexpr int64_t kHybridMaxTokens = 64;

// `forced`: --cpu-layers N (checked against the RAM tier); nullopt: auto,
// which gives the CPU layers only when the planner predicts a faster decode
// step. threads: the CPU layers' threads (0: one a core).
HybridSplit choose_hybrid_split(const GgufFile& file, const ModelFootprint& model, const PlacementPlan& base,
                                std::optional<int64_t> forced, int threads);

}  // namespace nt

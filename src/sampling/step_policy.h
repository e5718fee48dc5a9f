// How each step of a multi-step decode (ModelRunner::decode) picks the token
// the next step runs: the argmax of the step's logits, or a sampling chain
// that needs no history (top-k, then top-p and min-p, then one uniform draw
// at a positive temperature). `choose` runs the chain on the host over the
// step's top_k highest logits; a backend may run the same chain where the
// logits are instead, taking each step's draw from `draw`, in step order
// (Sampler::step_policy builds one).
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "sampling/candidates.h"

namespace nt {

struct StepPolicy {
  int64_t top_k = 0;  // 0: the argmax (argmax_first); else the chain over this many highest logits
  float temperature = 0.0f, top_p = 1.0f, min_p = 0.0f;
  std::function<int32_t(std::span<const Candidate>)> choose;
  std::function<double()> draw;

  bool argmax() const { return top_k == 0; }
};

}  // namespace nt

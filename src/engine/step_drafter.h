// Drafting with a model, one token per forward pass: the self draft (the
// target's first layers) and a draft model share it. For a greedy target each
// pick is the draft's highest logit; for a sampling one, a draw from the
// draft's own chain, whose distribution (q) is kept for the verification's
// rejection sampling.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/model_runner.h"
#include "sampling/sampler.h"
#include "sampling/token_distribution.h"

namespace nt {

class StepDrafter {
 public:
  // `params`: the draft's chain (greedy: highest-logit picks, no q).
  StepDrafter(ModelRunner& runner, SeqId seq, LayerSchedule schedule, const SamplingParams& params);

  // Runs `tokens` (at least one) from position `pos` of the sequence, then
  // each pick after the previous one, until `max` picks are appended to
  // `draft`. The last pick is not run: the cache then holds
  // pos + tokens.size() + max - 1 positions.
  void draft(std::span<const int32_t> tokens, int64_t pos, int64_t max, std::vector<int32_t>& draft);

  // The distribution each pick of the last draft() was drawn from; empty when greedy.
  std::span<const TokenDistribution> distributions() const { return distributions_; }
  // For a proposal of nothing: no picks, no distributions.
  void clear() { distributions_.clear(); }

 private:
  ModelRunner& runner_;
  SeqId seq_;
  LayerSchedule schedule_;
  Sampler sampler_;
  bool greedy_;
  Batch batch_;
  BatchOutputs out_;
  std::vector<TokenDistribution> distributions_;
};

// The chain a draft samples with for a target sampling with `target`: the
// same filters and temperature, so that q is close to p, without the
// penalties (they need the accepted history, which a draft does not keep;
// any q keeps the output exact) and with a seed of its own.
SamplingParams draft_sampling(const SamplingParams& target);

}  // namespace nt

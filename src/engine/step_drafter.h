// Drafting with a model, one token per forward pass: the self draft (the
// target's first layers) and a draft model share it. For a greedy target each
// pick is the draft's highest logit; for a sampling one, a draw from the
// draft's own chain, whose distribution (q) is kept for the verification's
// rejection sampling. A token tree branches where the draft is unsure: the
// likeliest paths under the draft's probabilities are expanded first.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/draft_calibration.h"
#include "engine/draft_tree.h"
#include "runtime/model_runner.h"
#include "sampling/sampler.h"
#include "sampling/token_distribution.h"

namespace nt {

// Candidate tokens a node of a drafted tree offers: its draft's likeliest.
inline constexpr int64_t kBranching = 8;

class StepDrafter {
 public:
  // `params`: the draft's chain (greedy: highest-logit picks, no q).
  StepDrafter(ModelRunner& runner, SeqId seq, LayerSchedule schedule, const SamplingParams& params);

  // Runs `tokens` (at least one) from position `pos` of the sequence, then
  // each pick after the previous one, until `max` picks are appended to
  // `draft`. The last pick is not run: the cache then holds
  // pos + tokens.size() + max - 1 positions.
  void draft(std::span<const int32_t> tokens, int64_t pos, int64_t max, std::vector<int32_t>& draft);

  // A token tree after `context`, whose tokens from index `from` on run
  // first at their positions (at least the last): best first, each of at
  // most max_depth passes runs the likeliest node not yet run (the context's
  // last token first) and makes its kBranching likeliest next tokens
  // candidates. A candidate's likelihood is its parent's times the chance
  // that the target keeps it: the draft's probability of it (softmax of the
  // logits for a greedy target, the draft's chain for a sampling one) as
  // calibrated by what the target kept of earlier trees (DraftCalibration,
  // learnt from how `context` continues the last one). The tree is the
  // max_nodes likeliest candidates, none deeper than max_depth; its picks are
  // deterministic (no distributions). The cache then holds the context and
  // cached_path() from `from` on.
  void draft_tree(std::span<const int32_t> context, int64_t from, int64_t max_depth, int64_t max_nodes, DraftTree& tree);
  // The tokens the cache holds after draft_tree's context: the path to the node it ran last.
  const std::vector<int32_t>& cached_path() const { return cached_tokens_; }

  // The distribution each pick of the last draft() was drawn from; empty when greedy.
  std::span<const TokenDistribution> distributions() const { return distributions_; }
  // For a proposal of nothing: no picks, no distributions.
  void clear() { distributions_.clear(); }

 private:
  // The `width` likeliest next tokens after a row of logits, likeliest first, with their probabilities.
  void likeliest(std::span<float> logits, int64_t width, TokenDistribution& out);
  // Runs what the cache lacks of node's path (below the tokens, which end at
  // `base` - 1) and returns the row after it.
  std::span<float> run_path(const DraftTree& tree, int32_t node, int64_t base);
  // Counts, for the candidates the last tree offered along the path `context`
  // took past it, which one the target kept.
  void learn(std::span<const int32_t> context);

  ModelRunner& runner_;
  SeqId seq_;
  LayerSchedule schedule_;
  Sampler sampler_;
  bool greedy_;
  Batch batch_;
  BatchOutputs out_;
  std::vector<TokenDistribution> distributions_;
  std::vector<int32_t> cached_nodes_, cached_tokens_;  // draft_tree: the path the cache holds
  std::vector<int32_t> path_;
  Candidates top_;  // likeliest's, greedy
  DraftCalibration calibration_;
  // The last tree, the context it followed, and per node (the root first) the candidates it offered when run.
  DraftTree last_tree_;
  std::vector<int32_t> last_context_;
  std::vector<TokenDistribution> offered_;
};

// The chain a draft samples with for a target sampling with `target`: the
// same filters and temperature, so that q is close to p, without the
// penalties (they need the accepted history, which a draft does not keep;
// any q keeps the output exact) and with a seed of its own.
SamplingParams draft_sampling(const SamplingParams& target);

}  // namespace nt

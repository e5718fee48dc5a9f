// Self-speculative drafting: some of the target's own layers (the first ones,
// or those a layer-skip calibration keeps), its final norm and head draft
// token by token on the same sequence, with no second model and no extra
// weights. Their cache positions are the target's, and the
// verification pass (every layer) overwrites them.
#pragma once

#include <cstdint>

#include "engine/speculative.h"
#include "engine/step_drafter.h"
#include "runtime/model_runner.h"

namespace nt {

class SelfDraft final : public DraftSource {
 public:
  // Drafts with the first `layers` of the model's layers (1 to n_layers - 1),
  // picking with `params` (greedy by default; see StepDrafter).
  SelfDraft(ModelRunner& runner, SeqId seq, int64_t layers, const SamplingParams& params = greedy_sampling());
  // Drafts with the layers `schedule` runs (some, not all, of them).
  SelfDraft(ModelRunner& runner, SeqId seq, LayerSchedule schedule, const SamplingParams& params = greedy_sampling());

  void propose(std::span<const int32_t> context, int64_t max, std::vector<int32_t>& draft) override;
  void propose_tree(std::span<const int32_t> context, int64_t max_depth, int64_t max_nodes, DraftTree& tree) override;
  std::span<const TokenDistribution> distributions() const override { return drafter_.distributions(); }

 private:
  StepDrafter drafter_;
};

// The draft depth when none is asked for and no layer streams: half the layers.
int64_t default_self_draft_layers(int64_t n_layers);

}  // namespace nt

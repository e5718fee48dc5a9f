// Drafting with a second, smaller model of the same vocabulary: it runs in
// its own runner on its own sequence, which it keeps in step with the
// target's accepted context (the cached prefix both share is kept, the rest
// truncated and rerun), and drafts token by token (StepDrafter): greedy picks
// for a greedy target, draws from its own chain (with q) for a sampling one.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/speculative.h"
#include "engine/step_drafter.h"
#include "runtime/model_runner.h"
#include "tokenizer/vocab.h"

namespace nt {

class ModelDraft final : public DraftSource {
 public:
  // Drafts on sequence `seq` of `draft` (a runner of its own), picking with
  // `params` (see StepDrafter).
  ModelDraft(ModelRunner& draft, SeqId seq, const SamplingParams& params);

  void propose(std::span<const int32_t> context, int64_t max, std::vector<int32_t>& draft) override;
  void propose_tree(std::span<const int32_t> context, int64_t max_depth, int64_t max_nodes, DraftTree& tree) override;
  std::span<const TokenDistribution> distributions() const override { return drafter_.distributions(); }

 private:
  // Truncates the draft's sequence to the prefix its cache shares with
  // `context`, short of the context's last token (which runs for the first
  // pick); returns that prefix's length.
  int64_t keep_shared_prefix(std::span<const int32_t> context);

  ModelRunner& runner_;
  SeqId seq_;
  StepDrafter drafter_;
  std::vector<int32_t> cached_;  // the tokens the draft's sequence holds
};

// Refuses a draft whose tokens are not the target's, id for id: nt::Error
// naming both files and the first differing id with both pieces, or the
// two sizes. `target_rows` and `draft_rows` are the models' logit rows.
void check_same_vocabulary(const Vocabulary& target, int64_t target_rows, const std::string& target_path,
                           const Vocabulary& draft, int64_t draft_rows, const std::string& draft_path);

}  // namespace nt

#include "engine/tree_budget.h"

#include <algorithm>

#include "core/repetitions.h"
#include "engine/draft_verifier.h"

namespace nt {
namespace {

// The fastest of two timed stepwise passes of `tokens` tokens (after one untimed).
double pass_seconds(ModelRunner& runner, SeqId seq, int64_t tokens) {
  const int64_t vocab = runner.config().vocab_size;
  Batch batch;
  for (int64_t i = 0; i < tokens; ++i) batch.add(int32_t((i * 7919 + 13) % vocab), i, seq, Output::Argmax, true);
  BatchOutputs out;
  const std::vector<double> seconds = time_repetitions(2, [&] { runner.forward(batch, out); });
  runner.seq_truncate(seq, 0);
  return *std::min_element(seconds.begin(), seconds.end());
}

}  // namespace

TreeBudget measure_tree_budget(ModelRunner& runner, SeqId seq, int64_t draft_max) {
  runner.seq_truncate(seq, 0);
  TreeBudget budget;
  budget.chain_tokens = std::min(draft_max + 1, runner.context_size());
  const double chain = pass_seconds(runner, seq, budget.chain_tokens);
  for (int64_t tokens = 16; tokens <= std::min<int64_t>(256, runner.context_size()); tokens *= 2) {
    if (tokens <= budget.chain_tokens) continue;
    const double ratio = pass_seconds(runner, seq, tokens) / chain;
    budget.measured.push_back({tokens, ratio});
    if (ratio > kTreeCostRatio) break;
    budget.tokens = tokens;
  }
  return budget;
}

void warm_up_verification(ModelRunner& runner, SeqId seq, int64_t draft_max, bool trees) {
  runner.seq_truncate(seq, 0);
  const int64_t depth = std::min(draft_max, runner.context_size() - 1);
  if (depth < 1) return;
  DraftTree draft;
  for (int64_t i = 0; i < depth; ++i) draft.add(int32_t(i + 1), int32_t(i) - 1);
  Batch batch;
  BatchOutputs out;
  add_verification(batch, 0, 0, seq, draft, Output::Argmax);
  runner.forward(batch, out);
  runner.seq_truncate(seq, 0);
  if (!trees || depth < 2) return;
  draft.clear();
  draft.add(1, -1);
  draft.add(2, -1);
  batch.clear();
  add_verification(batch, 0, 0, seq, draft, Output::Argmax);
  runner.forward(batch, out);
  runner.seq_truncate(seq, 0);
}

}  // namespace nt

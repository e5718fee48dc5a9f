#include "engine/model_draft.h"

#include <algorithm>

#include "core/error.h"

namespace nt {

ModelDraft::ModelDraft(ModelRunner& draft, SeqId seq, const SamplingParams& params)
    : runner_(draft), seq_(seq), drafter_(draft, seq, LayerSchedule::all(), params) {}

int64_t ModelDraft::keep_shared_prefix(std::span<const int32_t> context) {
  const auto [mismatch, unused] = std::mismatch(cached_.begin(), cached_.end(), context.begin(), context.end());
  const int64_t reuse = runner_.seq_reusable(seq_, std::min<int64_t>(mismatch - cached_.begin(), int64_t(context.size()) - 1));
  runner_.seq_truncate(seq_, reuse);
  return reuse;
}

void ModelDraft::propose(std::span<const int32_t> context, int64_t max, std::vector<int32_t>& draft) {
  if (max <= 0 || context.empty()) return drafter_.clear();
  const int64_t reuse = keep_shared_prefix(context);
  const size_t first = draft.size();
  drafter_.draft(context.subspan(size_t(reuse)), reuse, max, draft);
  // The cache now holds the context and every pick but the last.
  cached_.assign(context.begin(), context.end());
  cached_.insert(cached_.end(), draft.begin() + std::ptrdiff_t(first), draft.end() - 1);
}

void ModelDraft::propose_tree(std::span<const int32_t> context, int64_t max_depth, int64_t max_nodes, DraftTree& tree) {
  tree.clear();
  if (max_depth <= 0 || max_nodes <= 0 || context.empty()) return drafter_.clear();
  const int64_t reuse = keep_shared_prefix(context);
  drafter_.draft_tree(context, reuse, max_depth, max_nodes, tree);
  // The cache now holds the context and the path the drafter ran last.
  cached_.assign(context.begin(), context.end());
  cached_.insert(cached_.end(), drafter_.cached_path().begin(), drafter_.cached_path().end());
}

namespace {

// A piece for an error message, quoted, with control bytes escaped.
std::string shown(const std::string& piece) {
  std::string out = "'";
  for (const unsigned char c : piece) {
    if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += char(c);
    }
  }
  return out + "'";
}

}  // namespace

void check_same_vocabulary(const Vocabulary& target, int64_t target_rows, const std::string& target_path,
                           const Vocabulary& draft, int64_t draft_rows, const std::string& draft_path) {
  if (target.size() != draft.size() || target_rows != draft_rows) {
    fail("--draft-model {}: its vocabulary has {} tokens ({} logits), the target {}'s {} ({} logits): a draft "
         "needs the target's vocabulary",
         draft_path, draft.size(), draft_rows, target_path, target.size(), target_rows);
  }
  for (int32_t id = 0; id < target.size(); ++id) {
    if (target.text(id) == draft.text(id)) continue;
    fail("--draft-model {}: token {} is {} there but {} in the target {}: a draft needs the target's vocabulary",
         draft_path, id, shown(draft.text(id)), shown(target.text(id)), target_path);
  }
}

}  // namespace nt

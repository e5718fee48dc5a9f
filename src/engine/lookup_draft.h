// Prompt lookup (n-gram) drafting: text that repeats a span of its context
// (a quoted passage, code being edited, a list) is predicted by what followed
// that span before. No model, no extra memory.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/speculative.h"

namespace nt {

class LookupDraft final : public DraftSource {
 public:
  // Matches suffixes of min_ngram to max_ngram tokens (1 <= min <= max). The
  // default skips one-token matches: they propose a wrong draft so often that
  // verifying it costs more than it saves (on the 2-core CPU, SmolLM2 chat
  // decoded at 0.66 of plain speed with them and 0.96 without).
  explicit LookupDraft(int64_t max_ngram = 3, int64_t min_ngram = 2);

  // The tokens that followed the most recent earlier occurrence of the
  // context's longest suffix of max_ngram tokens down to min_ngram, up to
  // `max`; nothing when none recurs. A continuation that reaches the end of
  // the context goes on as a repeat of what it copied: a match p tokens back
  // predicts a loop of period p (greedy decoding often settles into one).
  void propose(std::span<const int32_t> context, int64_t max, std::vector<int32_t>& draft) override;
  // Branches over several earlier occurrences: the continuations of every
  // match, in propose()'s order (longest n-gram, then most recent, first),
  // merged into one tree until it holds max_nodes.
  void propose_tree(std::span<const int32_t> context, int64_t max_depth, int64_t max_nodes, DraftTree& tree) override;

 private:
  // Calls on_match(from) for each earlier occurrence of the context's
  // suffixes, longest n-gram first and most recent first within one length,
  // with `from` the index of what followed it (once per index), until it
  // returns false.
  template <class OnMatch>
  void for_each_match(std::span<const int32_t> context, OnMatch on_match);

  // continuation_ = `count` tokens from context index `from` on, repeating
  // the copied span past the context's end.
  void continuation(std::span<const int32_t> context, int64_t from, int64_t count);

  int64_t max_ngram_, min_ngram_;
  std::vector<int32_t> continuation_;
  std::vector<uint8_t> used_;  // per context index: a match continued from it already
};

}  // namespace nt

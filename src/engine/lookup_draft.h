// Prompt lookup (n-gram) drafting: text that repeats a span of its context
// (a quoted passage, code being edited, a list) is predicted by what followed
// that span before. No model, no extra memory. A predicted output (the
// text the answer is expected to resemble, as in OpenAI's predicted
// outputs) is looked up the same way, before the context.
#pragma once

#include <cstdint>
#include <memory>
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
  // A draft with the default n-grams that searches `prediction` first (predict()).
  static std::unique_ptr<LookupDraft> predicting(std::vector<int32_t> prediction);

  // Tokens the output is expected to contain, searched before the context.
  // Their first token drafts the rest when it is the context's last and no
  // longer match does: the answer starting as predicted.
  void predict(std::vector<int32_t> prediction);

  // The tokens that followed the best earlier occurrence of the context's
  // longest suffix of max_ngram tokens down to min_ngram, up to `max`;
  // nothing when none recurs. In the prediction, the best occurrence is the
  // first from where the last pass's match led on (the output reads the
  // prediction forwards), and its continuation ends with the prediction. In
  // the context it is the most recent, and a continuation that reaches the
  // end of the context goes on as a repeat of what it copied: a match p
  // tokens back predicts a loop of period p (greedy decoding often settles
  // into one).
  void propose(std::span<const int32_t> context, int64_t max, std::vector<int32_t>& draft) override;
  // Branches over several earlier occurrences: the continuations of every
  // match, in propose()'s order (the prediction's, then the context's;
  // longest n-gram first), merged into one tree until it holds max_nodes.
  void propose_tree(std::span<const int32_t> context, int64_t max_depth, int64_t max_nodes, DraftTree& tree) override;

 private:
  // Where a continuation comes from: tokens of `text` from index `from` on.
  struct Match {
    std::span<const int32_t> text;
    int64_t from;
    bool loops;  // past the text's end it repeats what it copied (the context), or ends (the prediction)
  };

  // Calls on_match(match) for each occurrence of the context's suffixes, in
  // propose()'s order (once per continuation), until it returns false.
  template <class OnMatch>
  void for_each_match(std::span<const int32_t> context, OnMatch on_match);
  // The prediction's part of for_each_match; false once on_match stopped it.
  template <class OnMatch>
  bool for_each_prediction_match(std::span<const int32_t> context, OnMatch on_match);

  // continuation_ = up to `count` tokens of the match.
  void continuation(const Match& match, int64_t count);

  int64_t max_ngram_, min_ngram_;
  std::vector<int32_t> prediction_;
  int64_t cursor_ = 0;               // the prediction index the last pass's first match continued from
  size_t last_context_ = 0;          // the context's size then; a shorter one starts a new output
  std::vector<int32_t> continuation_;
  std::vector<uint8_t> used_;             // per context index: a match continued from it already
  std::vector<uint8_t> used_prediction_;  // the same per prediction index
};

}  // namespace nt

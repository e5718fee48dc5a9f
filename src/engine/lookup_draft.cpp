#include "engine/lookup_draft.h"

#include <algorithm>

#include "core/error.h"

namespace nt {

LookupDraft::LookupDraft(int64_t max_ngram, int64_t min_ngram) : max_ngram_(max_ngram), min_ngram_(min_ngram) {
  if (min_ngram < 1 || max_ngram < min_ngram) {
    fail("prompt lookup matches n-grams of {} to {} tokens: the shortest must be at least 1 and at most the longest",
         min_ngram, max_ngram);
  }
}

std::unique_ptr<LookupDraft> LookupDraft::predicting(std::vector<int32_t> prediction) {
  auto draft = std::make_unique<LookupDraft>();
  draft->predict(std::move(prediction));
  return draft;
}

void LookupDraft::predict(std::vector<int32_t> prediction) {
  prediction_ = std::move(prediction);
  cursor_ = 0;
  last_context_ = 0;
}

template <class OnMatch>
bool LookupDraft::for_each_prediction_match(std::span<const int32_t> context, OnMatch on_match) {
  const int64_t size = int64_t(context.size()), length = int64_t(prediction_.size());
  if (context.size() < last_context_) cursor_ = 0;  // a new output reads the prediction from its start
  last_context_ = context.size();
  used_prediction_.assign(size_t(length) + 1, 0);
  bool first = true;
  // A match at `start` of an n-token suffix; false once on_match stopped.
  const auto visit = [&](std::span<const int32_t> suffix, int64_t start) {
    const int64_t from = start + int64_t(suffix.size());
    if (from >= length || used_prediction_[size_t(from)]) return true;  // nothing follows, or seen
    if (!std::equal(suffix.begin(), suffix.end(), prediction_.begin() + start)) return true;
    used_prediction_[size_t(from)] = 1;
    if (first) cursor_ = from;
    first = false;
    return on_match(Match{prediction_, from, false});
  };
  for (int64_t n = std::min(max_ngram_, size); n >= min_ngram_; --n) {
    const auto suffix = context.subspan(size_t(size - n));
    // From where the last pass's match led on, nearest first; then the earlier occurrences, nearest first.
    const int64_t ahead = std::max<int64_t>(0, cursor_ - n);
    for (int64_t start = ahead; start + n <= length; ++start) {
      if (!visit(suffix, start)) return false;
    }
    for (int64_t start = ahead - 1; start >= 0; --start) {
      if (!visit(suffix, start)) return false;
    }
  }
  // The output starting as predicted, before a longer match can tell.
  if (size > 0 && min_ngram_ > 1 && first) return visit(context.subspan(size_t(size - 1)), 0);
  return true;
}

template <class OnMatch>
void LookupDraft::for_each_match(std::span<const int32_t> context, OnMatch on_match) {
  if (!prediction_.empty() && !for_each_prediction_match(context, on_match)) return;
  const int64_t size = int64_t(context.size());
  used_.assign(size_t(size) + 1, 0);
  // Longer n-grams first: they predict better than the last token alone.
  for (int64_t n = std::min(max_ngram_, size - 1); n >= min_ngram_; --n) {
    const auto suffix = context.subspan(size_t(size - n));
    // Most recent first; an occurrence ends before the suffix's own last token.
    for (int64_t start = size - n - 1; start >= 0; --start) {
      if (!std::equal(suffix.begin(), suffix.end(), context.begin() + start)) continue;
      const int64_t from = start + n;
      if (used_[size_t(from)]) continue;  // a longer n-gram matched here: the same continuation
      used_[size_t(from)] = 1;
      if (!on_match(Match{context, from, true})) return;
    }
  }
}

void LookupDraft::continuation(const Match& match, int64_t count) {
  const int64_t size = int64_t(match.text.size());
  continuation_.clear();
  for (int64_t i = match.from; i < match.from + count; ++i) {
    if (i < size) {
      continuation_.push_back(match.text[size_t(i)]);
    } else if (match.loops) {
      continuation_.push_back(continuation_[size_t(i - size)]);
    } else {
      break;
    }
  }
}

void LookupDraft::propose(std::span<const int32_t> context, int64_t max, std::vector<int32_t>& draft) {
  if (max <= 0) return;
  for_each_match(context, [&](const Match& match) {
    continuation(match, max);
    draft.insert(draft.end(), continuation_.begin(), continuation_.end());
    return false;
  });
}

void LookupDraft::propose_tree(std::span<const int32_t> context, int64_t max_depth, int64_t max_nodes, DraftTree& tree) {
  tree.clear();
  if (max_depth <= 0 || max_nodes <= 0) return;
  // Each match's continuation becomes a path, sharing what it has in common with the paths before it.
  for_each_match(context, [&](const Match& match) {
    continuation(match, max_depth);
    int32_t node = -1;
    for (const int32_t token : continuation_) {
      int32_t next = tree.child(node, token);
      if (next < 0) {
        if (int64_t(tree.size()) == max_nodes) return false;
        next = tree.add(token, node);
      }
      node = next;
    }
    return true;
  });
}

}  // namespace nt

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

template <class OnMatch>
void LookupDraft::for_each_match(std::span<const int32_t> context, OnMatch on_match) {
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
      if (!on_match(from)) return;
    }
  }
}

void LookupDraft::continuation(std::span<const int32_t> context, int64_t from, int64_t count) {
  const int64_t size = int64_t(context.size());
  continuation_.clear();
  for (int64_t i = from; i < from + count; ++i) {
    continuation_.push_back(i < size ? context[size_t(i)] : continuation_[size_t(i - size)]);
  }
}

void LookupDraft::propose(std::span<const int32_t> context, int64_t max, std::vector<int32_t>& draft) {
  if (max <= 0) return;
  for_each_match(context, [&](int64_t from) {
    continuation(context, from, max);
    draft.insert(draft.end(), continuation_.begin(), continuation_.end());
    return false;
  });
}

void LookupDraft::propose_tree(std::span<const int32_t> context, int64_t max_depth, int64_t max_nodes, DraftTree& tree) {
  tree.clear();
  if (max_depth <= 0 || max_nodes <= 0) return;
  // Each match's continuation becomes a path, sharing what it has in common with the paths before it.
  for_each_match(context, [&](int64_t from) {
    continuation(context, from, max_depth);
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

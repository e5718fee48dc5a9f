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

void LookupDraft::propose(std::span<const int32_t> context, int64_t max, std::vector<int32_t>& draft) {
  const int64_t size = int64_t(context.size());
  if (max <= 0) return;
  // Longer n-grams first: they predict better than the last token alone.
  for (int64_t n = std::min(max_ngram_, size - 1); n >= min_ngram_; --n) {
    const auto suffix = context.subspan(size_t(size - n));
    // The most recent occurrence that ends before the suffix's own last token.
    for (int64_t start = size - n - 1; start >= 0; --start) {
      if (!std::equal(suffix.begin(), suffix.end(), context.begin() + start)) continue;
      const int64_t from = start + n;
      const int64_t end = std::min(size, from + max);
      draft.insert(draft.end(), context.begin() + from, context.begin() + end);
      return;
    }
  }
}

}  // namespace nt

// Prompt lookup (n-gram) drafting: text that repeats a span of its context
// (a quoted passage, code being edited, a list) is predicted by what followed
// that span before. No model, no extra memory.
#pragma once

#include <cstdint>

#include "engine/speculative.h"

namespace nt {

class LookupDraft final : public DraftSource {
 public:
  // Matches suffixes of up to max_ngram (>= 1) tokens.
  explicit LookupDraft(int64_t max_ngram = 3);

  // The tokens that followed the most recent earlier occurrence of the
  // context's longest suffix of max_ngram tokens down to 1 (up to `max`, as
  // far as the context goes); nothing when even its last token is new.
  void propose(std::span<const int32_t> context, int64_t max, std::vector<int32_t>& draft) override;

 private:
  int64_t max_ngram_;
};

}  // namespace nt

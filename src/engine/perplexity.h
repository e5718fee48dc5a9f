// Perplexity by the standard method of established tools: the text is cut into
// non-overlapping windows of n_ctx tokens, each starting with BOS, and only the
// second half of each window is scored (so every scored token has at least
// n_ctx/2 tokens of context).
#pragma once

#include <functional>
#include <span>

#include "runtime/model_runner.h"

namespace nt {

struct PerplexityResult {
  double perplexity = 0;
  double standard_error = 0;  // of the perplexity, from the per-token NLL spread
  int64_t scored_tokens = 0;
  int64_t windows = 0;
};

// on_window(window index, running perplexity) reports progress; false stops
// there, and the result covers the windows scored so far.
PerplexityResult perplexity(ModelRunner& runner, std::span<const int32_t> tokens, int64_t n_ctx, int32_t bos,
                            const std::function<bool(int64_t, double)>& on_window);

}  // namespace nt

#include "engine/perplexity.h"

#include <cmath>
#include <vector>

#include "core/error.h"

namespace nt {

PerplexityResult perplexity(ModelRunner& runner, std::span<const int32_t> tokens, int64_t n_ctx, int32_t bos,
                            const std::function<bool(int64_t, double)>& on_window) {
  if (n_ctx < 4) fail("perplexity needs a context of at least 4 tokens (got {})", n_ctx);
  if (n_ctx > runner.context_size()) fail("perplexity context {} exceeds the runner's {}", n_ctx, runner.context_size());
  const int64_t windows = int64_t(tokens.size()) / n_ctx;
  if (windows == 0) fail("the text has {} tokens, fewer than one window of {}; use a smaller -c or a longer text", tokens.size(), n_ctx);
  const int64_t vocab = runner.config().vocab_size;
  std::vector<float> logits(size_t(n_ctx * vocab));
  std::vector<int32_t> window(static_cast<size_t>(n_ctx));
  double nll_sum = 0, nll_sq_sum = 0;
  int64_t count = 0, scored_windows = 0;
  for (int64_t w = 0; w < windows; ++w) {
    std::copy_n(tokens.begin() + w * n_ctx, n_ctx, window.begin());
    if (bos >= 0) window[0] = bos;
    runner.forward(window, 0, logits.data(), true);
    // Token i+1 is predicted from the logits at position i.
    for (int64_t i = n_ctx / 2; i + 1 < n_ctx; ++i) {
      const float* row = &logits[size_t(i * vocab)];
      double max = row[0];
      for (int64_t v = 1; v < vocab; ++v) max = std::max(max, double(row[v]));
      double sum = 0;
      for (int64_t v = 0; v < vocab; ++v) sum += std::exp(double(row[v]) - max);
      const double nll = std::log(sum) + max - double(row[window[size_t(i + 1)]]);
      nll_sum += nll;
      nll_sq_sum += nll * nll;
      ++count;
    }
    ++scored_windows;
    if (!on_window(w, std::exp(nll_sum / double(count)))) break;
  }
  PerplexityResult r;
  const double mean = nll_sum / double(count);
  const double variance = std::max(0.0, nll_sq_sum / double(count) - mean * mean);
  r.perplexity = std::exp(mean);
  r.standard_error = r.perplexity * std::sqrt(variance / double(count - 1 > 0 ? count - 1 : 1));
  r.scored_tokens = count;
  r.windows = scored_windows;
  return r;
}

}  // namespace nt

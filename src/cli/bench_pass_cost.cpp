#include "cli/bench_pass_cost.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "core/repetitions.h"

namespace nt::cli {

void check_pass_tokens(const std::vector<int64_t>& pass_tokens, int64_t context) {
  for (const int64_t t : pass_tokens) {
    if (t < 1 || t > context) fail("--pass-tokens {}: each pass needs 1 to {} tokens (the context; raise -c)", t, context);
  }
}

void bench_pass_cost(ModelRunner& runner, const std::string& model_name, const std::vector<int64_t>& pass_tokens,
                     int repetitions) {
  const int64_t vocab = runner.config().vocab_size;
  const int64_t longest = *std::max_element(pass_tokens.begin(), pass_tokens.end());
  std::vector<int32_t> tokens(static_cast<size_t>(longest));
  for (int64_t i = 0; i < longest; ++i) tokens[size_t(i)] = int32_t((i * 7919 + 13) % vocab);
  std::vector<float> logits(static_cast<size_t>(vocab));
  fmt::print("\n| model | backend | tokens per pass | ms per pass | vs {} | tok/s if all are accepted |\n|---|---|---|---|---|---|\n",
             pass_tokens.front());
  double first = 0;
  for (const int64_t t : pass_tokens) {
    const auto seconds = time_repetitions(repetitions, [&] {
      runner.forward({tokens.data(), size_t(t)}, 0, logits.data(), false);
    });
    const Spread s = spread(seconds);
    if (first == 0) first = s.mean;
    fmt::print("| {} | {} | {} | {:.2f} ± {:.2f} | {:.3f} | {:.1f} |\n", model_name, runner.description(), t, 1e3 * s.mean,
               1e3 * s.stdev, s.mean / first, double(t) / s.mean);
  }
}

}  // namespace nt::cli

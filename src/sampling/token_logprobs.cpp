#include "sampling/token_logprobs.h"

#include <cmath>

#include "core/error.h"
#include "sampling/candidates.h"

namespace nt {

TokenLogprobs token_logprobs(std::span<const float> logits, int32_t chosen, int32_t top) {
  if (chosen < 0 || size_t(chosen) >= logits.size()) {
    fail("logprobs: token {} is outside the row of {} logits", chosen, logits.size());
  }
  if (top < 0 || size_t(top) >= logits.size()) fail("logprobs: {} top tokens of a row of {}", top, logits.size());
  float highest = -INFINITY;
  for (const float x : logits) highest = std::max(highest, x);
  double sum = 0.0;
  for (const float x : logits) sum += std::exp(double(x) - double(highest));
  const double log_total = double(highest) + std::log(sum);
  const auto logprob = [&](int32_t id) { return float(double(logits[size_t(id)]) - log_total); };

  TokenLogprobs out;
  out.chosen = {chosen, logprob(chosen)};
  if (top > 0) {
    Candidates likeliest;
    likeliest.assign(logits, top);  // the top highest, in order
    for (const Candidate& c : likeliest.view()) out.top.push_back({c.id, logprob(c.id)});
  }
  return out;
}

}  // namespace nt

// The sampling tests' shared tools: fresh random logits (the seed is
// returned so a failing run can be replayed), a Pearson chi-square test, and
// the sampler chain's probabilities written out in float64 as a reference.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "sampling/sampler.h"

namespace nt::test {

inline std::mt19937_64 fresh_rng(uint64_t& seed) {
  seed = (uint64_t(std::random_device{}()) << 32) | std::random_device{}();
  return std::mt19937_64(seed);
}

inline std::vector<float> random_logits(std::mt19937_64& rng, size_t n, float spread) {
  std::normal_distribution<float> normal(0.0f, spread);
  std::vector<float> logits(n);
  for (auto& x : logits) x = normal(rng);
  return logits;
}

// Pearson chi-square of `counts` against `probs`; cells expecting fewer than
// 5 draws are pooled. Returns the statistic and its degrees of freedom.
inline std::pair<double, int> chi_square(const std::vector<int64_t>& counts, const std::vector<double>& probs, int64_t n) {
  double stat = 0.0, pooled_expected = 0.0;
  int64_t pooled_observed = 0;
  int cells = 0;
  for (size_t i = 0; i < probs.size(); ++i) {
    const double expected = probs[i] * double(n);
    if (expected < 5.0) {
      pooled_expected += expected;
      pooled_observed += counts[i];
      continue;
    }
    stat += (counts[i] - expected) * (counts[i] - expected) / expected;
    ++cells;
  }
  if (pooled_expected > 0.0) {
    stat += (pooled_observed - pooled_expected) * (pooled_observed - pooled_expected) / pooled_expected;
    ++cells;
  }
  return {stat, cells - 1};
}

// Upper quantile of chi-square(df) with tail ~1e-9 (Wilson-Hilferty, z = 6):
// a correct sampler fails this about once in a billion runs.
inline double chi_square_bound(int df) {
  const double a = 2.0 / (9.0 * df);
  return df * std::pow(1.0 - a + 6.0 * std::sqrt(a), 3.0);
}

// The whole default chain written out in float64: top-k (none when <= 0),
// then top-p and min-p on the renormalised temperature-1 probabilities, then
// softmax(logit / T). Penalties are not applied.
inline std::vector<double> chain_probabilities(const std::vector<float>& logits, const SamplingParams& p) {
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  if (p.top_k > 0) ids.resize(std::min(ids.size(), size_t(p.top_k)));

  const double top = logits[ids[0]];
  double total = 0.0;
  for (int32_t id : ids) total += std::exp(logits[id] - top);
  double mass = 0.0;
  size_t nucleus = 0;
  while (nucleus < ids.size() && mass < double(p.top_p)) mass += std::exp(logits[ids[nucleus++]] - top) / total;
  ids.resize(nucleus);
  std::erase_if(ids, [&](int32_t id) { return std::exp(logits[id] - top) < double(p.min_p); });

  std::vector<double> probs(logits.size(), 0.0);
  double tempered_total = 0.0;
  for (int32_t id : ids) tempered_total += probs[id] = std::exp((logits[id] - top) / p.temperature);
  for (auto& x : probs) x /= tempered_total;
  return probs;
}

}  // namespace nt::test

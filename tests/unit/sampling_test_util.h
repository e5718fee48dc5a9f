// Fresh random logits for the sampling tests; the seed is returned so a
// failing run can be replayed.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

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

}  // namespace nt::test

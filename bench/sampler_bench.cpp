// Host cost of one sampling step over a Llama 3 vocabulary (128256 logits
// drawn from N(0, 3)): the CLI's default chain (top-k 40, top-p 0.95, min-p
// 0.05, T 0.8) and greedy. A GPU decode step pays this on top of the forward
// pass whenever the runner cannot pick the token itself.
// Usage: sampler_bench
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "sampling/sampler.h"

int main() {
  constexpr int64_t kVocab = 128256;
  constexpr int kRows = 50, kDraws = 300;
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<std::vector<float>> rows(kRows, std::vector<float>(kVocab));
  for (auto& row : rows) {
    for (float& x : row) x = normal(rng);
  }
  for (const float temperature : {0.8f, 0.0f}) {
    nt::SamplingParams params;
    params.temperature = temperature;
    nt::Sampler sampler(params, kVocab);
    std::vector<float> logits(kVocab);
    std::vector<double> seconds;
    for (int i = 0; i < kDraws; ++i) {
      logits = rows[size_t(i % kRows)];  // sample() penalises in place: a fresh copy each time, untimed
      const auto t0 = std::chrono::steady_clock::now();
      volatile int32_t token = sampler.sample(logits);
      (void)token;
      seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(seconds.begin(), seconds.end());
    std::printf("temperature %.1f: min %.1f us, median %.1f us per token (%lld logits)\n", temperature, seconds.front() * 1e6,
                seconds[seconds.size() / 2] * 1e6, static_cast<long long>(kVocab));
  }
}

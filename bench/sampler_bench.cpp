// Host cost of one sampling step over a Llama 3 vocabulary (128256 logits
// drawn from N(0, 3)): the CLI's default chain (top-k 40, top-p 0.95, min-p
// 0.05, T 0.8) and greedy, from the whole row (sample) and from the row's top
// that a GPU runner selects (sample_top). A decode step pays this on top of
// the forward pass whenever the runner cannot pick the token itself.
// Usage: sampler_bench
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <random>
#include <vector>

#include "sampling/sampler.h"

namespace {

constexpr int kDraws = 300;

// Min and median over kDraws calls of draw(i); prepare(i) runs untimed before each.
void report(const char* what, const std::function<void(int)>& prepare, const std::function<int32_t(int)>& draw) {
  std::vector<double> seconds;
  for (int i = 0; i < kDraws; ++i) {
    prepare(i);
    const auto t0 = std::chrono::steady_clock::now();
    volatile int32_t token = draw(i);
    (void)token;
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(seconds.begin(), seconds.end());
  std::printf("%s: min %.1f us, median %.1f us per token\n", what, seconds.front() * 1e6, seconds[seconds.size() / 2] * 1e6);
}

}  // namespace

int main() {
  constexpr int64_t kVocab = 128256;
  constexpr int kRows = 50;
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<std::vector<float>> rows(kRows, std::vector<float>(kVocab));
  for (auto& row : rows) {
    for (float& x : row) x = normal(rng);
  }
  std::printf("%lld logits\n", static_cast<long long>(kVocab));
  for (const float temperature : {0.8f, 0.0f}) {
    nt::SamplingParams params;
    params.temperature = temperature;
    nt::Sampler sampler(params, kVocab);
    std::vector<float> logits(kVocab);
    char what[80];
    std::snprintf(what, sizeof what, "temperature %.1f, whole row", temperature);
    // sample() penalises in place: a fresh copy each time, untimed.
    report(what, [&](int i) { logits = rows[size_t(i % kRows)]; }, [&](int) { return sampler.sample(logits); });
    nt::Candidates top;
    std::snprintf(what, sizeof what, "temperature %.1f, the row's top %lld", temperature,
                  static_cast<long long>(sampler.top_needed()));
    report(what, [&](int i) { top.assign(rows[size_t(i % kRows)], sampler.top_needed()); },
           [&](int) { return sampler.sample_top(top.view()); });
  }
}

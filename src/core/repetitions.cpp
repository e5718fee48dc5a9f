#include "core/repetitions.h"

#include <chrono>
#include <cmath>

namespace nt {

Spread spread(std::span<const double> samples) {
  Spread s;
  if (samples.empty()) return s;
  for (const double x : samples) s.mean += x;
  s.mean /= double(samples.size());
  if (samples.size() < 2) return s;
  double squares = 0;
  for (const double x : samples) squares += (x - s.mean) * (x - s.mean);
  s.stdev = std::sqrt(squares / double(samples.size() - 1));
  return s;
}

std::vector<double> time_repetitions(int repetitions, const std::function<void()>& work) {
  using clock = std::chrono::steady_clock;
  work();  // warm-up, not counted
  std::vector<double> seconds;
  for (int r = 0; r < repetitions; ++r) {
    const auto start = clock::now();
    work();
    seconds.push_back(std::chrono::duration<double>(clock::now() - start).count());
  }
  return seconds;
}

}  // namespace nt

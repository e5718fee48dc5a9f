// Timing of repeated work as benchmarks report it (llama-bench's way): one
// uncounted warm-up run takes first touches (weights paged in, caches,
// allocations, clocks ramping up) out of the numbers, then every timed run
// counts, and the result is their mean and spread.
#pragma once

#include <functional>
#include <span>
#include <vector>

namespace nt {

struct Spread {
  double mean = 0;
  double stdev = 0;  // sample standard deviation (n - 1); 0 for one sample
};

Spread spread(std::span<const double> samples);

// Runs `work` once untimed, then `repetitions` times; the seconds of each timed run.
std::vector<double> time_repetitions(int repetitions, const std::function<void()>& work);

}  // namespace nt

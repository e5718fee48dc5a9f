// Benchmark repetitions: the warm-up run is not among the timed ones, and the
// spread is the sample mean and standard deviation.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "core/repetitions.h"

namespace nt {
namespace {

TEST(TimeRepetitions, TheColdFirstRunIsNotCounted) {
  int runs = 0;
  const auto seconds = time_repetitions(3, [&] {
    // The first run is slow, as a cold one is.
    std::this_thread::sleep_for(std::chrono::milliseconds(runs++ == 0 ? 300 : 1));
  });
  EXPECT_EQ(runs, 4);
  ASSERT_EQ(seconds.size(), 3u);
  for (const double s : seconds) {
    EXPECT_GE(s, 0.001);
    EXPECT_LT(s, 0.2);
  }
}

TEST(Spread, IsTheSampleMeanAndStandardDeviation) {
  // Mean 5; squared deviations sum to 32 over 8 samples: sqrt(32 / 7).
  const std::vector<double> samples = {2, 4, 4, 4, 5, 5, 7, 9};
  const Spread s = spread(samples);
  EXPECT_DOUBLE_EQ(s.mean, 5.0);
  EXPECT_NEAR(s.stdev, 2.1380899352993950, 1e-12);
  const std::vector<double> one = {3.5};
  EXPECT_DOUBLE_EQ(spread(one).mean, 3.5);
  EXPECT_EQ(spread(one).stdev, 0.0);
}

}  // namespace
}  // namespace nt

#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "runtime/chained_progress.h"

namespace nt {
namespace {

// Two runners of 100 and 50 bytes report as one load of 150.
TEST(ChainedProgress, EachRunnerCountsOnFromTheLast) {
  std::vector<std::pair<uint64_t, uint64_t>> seen;
  ChainedProgress chain([&](uint64_t done, uint64_t total) { seen.emplace_back(done, total); });
  const LoadProgress first = chain.next();
  first(40, 100);
  first(100, 100);
  const LoadProgress second = chain.next();
  second(50, 50);
  const std::vector<std::pair<uint64_t, uint64_t>> want = {{40, 100}, {100, 100}, {150, 150}};
  EXPECT_EQ(seen, want);
}

TEST(ChainedProgress, NothingToReportGivesEmptyCallbacks) {
  ChainedProgress chain({});
  EXPECT_FALSE(chain.next());
}

}  // namespace
}  // namespace nt

// Which of a layer's misses the CPU computes while the link copies the rest
// (planning/expert_plan.h, split_misses), on costs chosen to make each rule
// decide.
#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "planning/expert_plan.h"

namespace nt {
namespace {

struct Split {
  std::vector<int32_t> on_cpu, on_link;
};

Split split(std::vector<std::pair<int64_t, int32_t>> misses, const MissCosts& costs, ExpertMisses policy) {
  Split s;
  split_misses(misses, costs, policy, s.on_cpu, s.on_link);
  return s;
}

TEST(ExpertMisses, TheCpuTakesAsManyAsFinishWithTheLink) {
  // Four one-row misses, the CPU as fast as the link: two each.
  const std::vector<std::pair<int64_t, int32_t>> four{{1, 3}, {1, 1}, {1, 2}, {1, 0}};
  Split s = split(four, {.copy_seconds = 1.0, .cpu_row_seconds = 1.0}, ExpertMisses::Auto);
  EXPECT_EQ(s.on_cpu, (std::vector<int32_t>{0, 1}));  // ties go to the lower expert
  EXPECT_EQ(s.on_link, (std::vector<int32_t>{2, 3}));
  // A CPU four times faster: four of five, so that neither side waits long.
  const std::vector<std::pair<int64_t, int32_t>> five{{1, 0}, {1, 1}, {1, 2}, {1, 3}, {1, 4}};
  s = split(five, {.copy_seconds = 1.0, .cpu_row_seconds = 0.25}, ExpertMisses::Auto);
  EXPECT_EQ(s.on_cpu.size(), 4u);
  EXPECT_EQ(s.on_link, (std::vector<int32_t>{4}));
  // A slow CPU takes none: its one expert would outlast the link's rest.
  s = split(four, {.copy_seconds = 1.0, .cpu_row_seconds = 3.5}, ExpertMisses::Auto);
  EXPECT_TRUE(s.on_cpu.empty());
  EXPECT_EQ(s.on_link.size(), 4u);
}

TEST(ExpertMisses, TheFewestRowsGoToTheCpuFirst) {
  // Each further row costs the CPU a quarter more: the 8-row expert costs 2.75 s there.
  const std::vector<std::pair<int64_t, int32_t>> misses{{8, 0}, {1, 5}, {2, 3}, {1, 6}};
  const MissCosts costs{.copy_seconds = 1.0, .cpu_row_seconds = 0.5};
  EXPECT_DOUBLE_EQ(costs.cpu_seconds(8), 0.5 * (1 + 0.25 * 7));
  const Split s = split(misses, costs, ExpertMisses::Auto);
  // 0.5 (expert 5) <= 3, then 1.0 (expert 6) <= 2, then 1.625 (expert 3) > 1: stop.
  EXPECT_EQ(s.on_cpu, (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(s.on_link, (std::vector<int32_t>{3, 0}));
}

TEST(ExpertMisses, LinkAndCpuPoliciesTakeAll) {
  const std::vector<std::pair<int64_t, int32_t>> misses{{2, 1}, {1, 4}};
  const MissCosts costs{.copy_seconds = 1.0, .cpu_row_seconds = 0.1};
  Split s = split(misses, costs, ExpertMisses::Link);
  EXPECT_TRUE(s.on_cpu.empty());
  EXPECT_EQ(s.on_link, (std::vector<int32_t>{4, 1}));
  s = split(misses, {.copy_seconds = 0.1, .cpu_row_seconds = 100.0}, ExpertMisses::Cpu);
  EXPECT_EQ(s.on_cpu, (std::vector<int32_t>{4, 1}));
  EXPECT_TRUE(s.on_link.empty());
}

}  // namespace
}  // namespace nt

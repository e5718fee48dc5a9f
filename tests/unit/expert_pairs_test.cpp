// A pass's (row, choice) pairs grouped by rows and sorted by expert, in
// chunks: each group's records checked against the pairs they came from.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "core/error.h"
#include "runtime/expert_pairs.h"

namespace nt {
namespace {

TEST(ExpertPairs, EachGroupSortsItsPairsByExpertInChunks) {
  const int64_t n = 23, k = 3, experts = 7, rows_per_group = 5, chunk_pairs = 4;
  std::mt19937 rng(11);
  std::vector<int32_t> chosen(size_t(n * k));
  for (int64_t t = 0; t < n; ++t) {  // k distinct experts a row, expert 0 in every row (a run to cut)
    std::vector<int32_t> all(static_cast<size_t>(experts));
    for (int32_t e = 0; e < experts; ++e) all[size_t(e)] = e;
    std::shuffle(all.begin() + 1, all.end(), rng);
    std::copy_n(all.begin(), k, chosen.begin() + t * k);
  }
  std::vector<int32_t> records(size_t(kPairGroupInts * n * k), -1);
  std::vector<PairGroup> groups;
  const int64_t chunks = group_pairs_by_expert(chosen.data(), n, k, experts, rows_per_group, chunk_pairs, records.data(), groups);

  ASSERT_EQ(groups.size(), size_t((n + rows_per_group - 1) / rows_per_group));
  int64_t chunks_seen = 0, next_row = 0;
  for (const PairGroup& g : groups) {
    ASSERT_EQ(g.first_row, next_row);
    next_row += g.rows;
    ASSERT_EQ(g.pairs, g.rows * k);
    const int32_t first_pair = int32_t(g.first_row * k);
    // Every pair of the group once, by expert then pair; place is the inverse; expert_of its expert.
    std::vector<int32_t> want(static_cast<size_t>(g.pairs));
    for (int32_t i = 0; i < g.pairs; ++i) want[size_t(i)] = first_pair + i;
    std::stable_sort(want.begin(), want.end(), [&](int32_t a, int32_t b) { return chosen[size_t(a)] < chosen[size_t(b)]; });
    for (int64_t s = 0; s < g.pairs; ++s) {
      EXPECT_EQ(g.sorted()[s], want[size_t(s)]) << "sorted place " << s;
      EXPECT_EQ(g.place()[g.sorted()[s] - first_pair], s) << "sorted place " << s;
      EXPECT_EQ(g.expert_of()[s], chosen[size_t(g.sorted()[s])]) << "sorted place " << s;
    }
    // The chunks cover the sorted pairs in order, each one expert's and at most chunk_pairs.
    int64_t covered = 0;
    for (int64_t c = 0; c < g.chunks; ++c) {
      const ExpertChunk& chunk = g.chunk_list()[c];
      EXPECT_EQ(chunk.first, covered);
      EXPECT_GE(chunk.count, 1);
      EXPECT_LE(chunk.count, chunk_pairs);
      for (int32_t s = chunk.first; s < chunk.first + chunk.count; ++s) EXPECT_EQ(g.expert_of()[s], chunk.expert);
      // A chunk shorter than chunk_pairs ends its expert's run.
      if (chunk.count < chunk_pairs && chunk.first + chunk.count < g.pairs) {
        EXPECT_NE(g.expert_of()[chunk.first + chunk.count], chunk.expert);
      }
      covered += chunk.count;
    }
    EXPECT_EQ(covered, g.pairs);
    chunks_seen += g.chunks;
    // The records lie back to back.
    if (&g != &groups.back()) EXPECT_EQ((&g + 1)->at, g.at + g.ints());
  }
  EXPECT_EQ(next_row, n);
  EXPECT_EQ(chunks, chunks_seen);
  // Expert 0's five pairs in the first group take two chunks, of 4 and 1.
  ASSERT_GE(groups[0].chunks, 2);
  EXPECT_EQ(groups[0].chunk_list()[0].expert, 0);
  EXPECT_EQ(groups[0].chunk_list()[0].count, 4);
  EXPECT_EQ(groups[0].chunk_list()[1].expert, 0);
  EXPECT_EQ(groups[0].chunk_list()[1].count, 1);
}

TEST(ExpertPairs, AnExpertOutOfRangeIsAnError) {
  const std::vector<int32_t> chosen{0, 5};
  std::vector<int32_t> records(size_t(kPairGroupInts * 2));
  std::vector<PairGroup> groups;
  EXPECT_THROW(group_pairs_by_expert(chosen.data(), 1, 2, 4, 1, 8, records.data(), groups), Error);
}

}  // namespace
}  // namespace nt

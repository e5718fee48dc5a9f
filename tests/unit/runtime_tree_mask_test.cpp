// The ancestor bits a GPU attention kernel reads for a chunk of token-tree
// rows: derived here from the tree's parents, walked by hand, against what
// write_tree_masks packs, for a chunk that cuts the tree and holds a chain.
#include <gtest/gtest.h>

#include <vector>

#include "planning/device_memory_plan.h"
#include "runtime/batch.h"
#include "runtime/tree_mask.h"

namespace nt {
namespace {

TEST(TreeMask, EachTreeRowHoldsItsAncestorsAndItself) {
  // A chain of 2 on sequence 1, then a tree of 40 entries on sequence 0:
  // entry i's parent is (i - 1) / 2, a binary tree, so rows reach bits past the first word.
  Batch batch;
  batch.add(1, 5, 1);
  batch.add(2, 6, 1);
  std::vector<int32_t> parents(40);
  for (int32_t i = 0; i < 40; ++i) {
    parents[size_t(i)] = i == 0 ? -1 : (i - 1) / 2;
    const int64_t pos = i == 0 ? 9 : batch.entries[size_t(2 + parents[size_t(i)])].pos + 1;
    batch.add(3, pos, 0, Output::None, false, parents[size_t(i)]);
  }
  const std::vector<SequenceRun> runs = sequence_runs(batch);
  // A chunk from the chain's second entry to the tree's 30th.
  const int64_t at = 1, n = 31;
  const int64_t words = chunk_tree_words(runs, at, n);
  EXPECT_EQ(words, tree_mask_words(40));
  EXPECT_EQ(words, 2);
  std::vector<uint32_t> masks(size_t(n * words), 0xdeadbeefu);
  write_tree_masks(batch, runs, at, n, words, masks.data());
  for (int64_t row = 0; row < n; ++row) {
    std::vector<bool> want(size_t(words * 32), false);
    if (row > 0) {  // a tree row: entry row - 1 of the tree
      for (int32_t j = int32_t(row - 1); j >= 0; j = parents[size_t(j)]) want[size_t(j)] = true;
    }
    for (int64_t j = 0; j < words * 32; ++j) {
      const bool bit = (masks[size_t(row * words + j / 32)] >> (j % 32)) & 1u;
      EXPECT_EQ(bit, want[size_t(j)]) << "row " << row << ", bit " << j;
    }
  }
  // No tree in the chunk: no words.
  EXPECT_EQ(chunk_tree_words(runs, 0, 2), 0);
}

}  // namespace
}  // namespace nt

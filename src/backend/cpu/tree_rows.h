// What the CPU layer needs of a pass's token trees (SequenceRun::tree), per
// row: the position its keys and queries are rotated for (its entry's, the
// prefix length plus its depth) and the cache positions it attends to past
// its tree's start (its path, root first).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/batch.h"

namespace nt::cpu {

struct TreeRows {
  std::vector<int64_t> rope_pos;    // per row
  std::vector<int64_t> tree_start;  // per row: its run's first position
  std::vector<int64_t> path_start;  // per row and one past the last: offsets into paths (empty for chain rows)
  std::vector<int64_t> paths;       // cache positions

  // The rows of entries [at, at + n) of `batch`, whose runs are `runs`.
  void assign(const Batch& batch, std::span<const SequenceRun> runs, int64_t at, int64_t n);
};

// Whether any of the runs is a token tree.
bool has_tree(std::span<const SequenceRun> runs);

}  // namespace nt::cpu

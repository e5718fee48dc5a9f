#include "runtime/tree_mask.h"

#include <algorithm>
#include <vector>

#include "planning/device_memory_plan.h"

namespace nt {

int64_t chunk_tree_words(std::span<const SequenceRun> runs, int64_t at, int64_t n) {
  int64_t words = 0;
  for (const SequenceRun& run : runs) {
    const bool in_chunk = run.first < at + n && run.first + run.count > at;
    if (run.tree && in_chunk) words = std::max(words, tree_mask_words(run.count));
  }
  return words;
}

void write_tree_masks(const Batch& batch, std::span<const SequenceRun> runs, int64_t at, int64_t n, int64_t words,
                      uint32_t* masks) {
  std::fill(masks, masks + n * words, 0u);
  std::vector<int32_t> path;
  for (const SequenceRun& run : runs) {
    if (!run.tree) continue;
    for (int64_t e = std::max(run.first, at); e < std::min(run.first + run.count, at + n); ++e) {
      uint32_t* row = masks + (e - at) * words;
      tree_path(batch, run, e, path);
      for (const int32_t j : path) row[j / 32] |= 1u << (j % 32);
    }
  }
}

}  // namespace nt

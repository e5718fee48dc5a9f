#include "backend/cpu/tree_rows.h"

#include <algorithm>

namespace nt::cpu {

bool has_tree(std::span<const SequenceRun> runs) {
  return std::any_of(runs.begin(), runs.end(), [](const SequenceRun& r) { return r.tree; });
}

void TreeRows::assign(const Batch& batch, std::span<const SequenceRun> runs, int64_t at, int64_t n) {
  rope_pos.resize(size_t(n));
  tree_start.resize(size_t(n));
  path_start.assign(1, 0);
  paths.clear();
  std::vector<int32_t> path;
  for (const SequenceRun& run : runs) {
    const int64_t first = std::max(run.first, at), end = std::min(run.first + run.count, at + n);
    for (int64_t e = first; e < end; ++e) {
      const size_t row = size_t(e - at);
      rope_pos[row] = batch.entries[size_t(e)].pos;
      tree_start[row] = run.pos;
      if (run.tree) {
        tree_path(batch, run, e, path);
        for (const int32_t index : path) paths.push_back(run.pos + index);
      }
      path_start.push_back(int64_t(paths.size()));
    }
  }
}

}  // namespace nt::cpu

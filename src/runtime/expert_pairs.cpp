#include "runtime/expert_pairs.h"

#include <algorithm>

#include "core/error.h"

namespace nt {

int64_t group_pairs_by_expert(const int32_t* chosen, int64_t n, int64_t k, int64_t n_experts, int64_t rows_per_group,
                              int64_t chunk_pairs, int32_t* records, std::vector<PairGroup>& groups) {
  if (rows_per_group < 1 || chunk_pairs < 1) fail("internal: pair groups of {} rows, chunks of {}", rows_per_group, chunk_pairs);
  groups.clear();
  std::vector<int64_t> count(static_cast<size_t>(n_experts)), next(static_cast<size_t>(n_experts));
  int64_t chunks = 0;
  int32_t* at = records;
  for (int64_t first = 0; first < n; first += rows_per_group) {
    PairGroup g{first, std::min(rows_per_group, n - first), 0, 0, at};
    g.pairs = g.rows * k;
    const int32_t* group_chosen = chosen + first * k;
    std::fill(count.begin(), count.end(), 0);
    for (int64_t i = 0; i < g.pairs; ++i) {
      const int32_t e = group_chosen[i];
      if (e < 0 || e >= n_experts) fail("internal: pair {} chose expert {} of {}", first * k + i, e, n_experts);
      ++count[size_t(e)];
    }
    auto* chunk = reinterpret_cast<ExpertChunk*>(at + 3 * g.pairs);
    int64_t place = 0;
    for (int64_t e = 0; e < n_experts; ++e) {
      next[size_t(e)] = place;
      for (int64_t c = 0; c < count[size_t(e)]; c += chunk_pairs) {
        chunk[g.chunks++] = {int32_t(e), int32_t(place + c), int32_t(std::min(chunk_pairs, count[size_t(e)] - c))};
      }
      place += count[size_t(e)];
    }
    for (int64_t i = 0; i < g.pairs; ++i) {
      const int32_t e = group_chosen[i];
      const int64_t to = next[size_t(e)]++;
      at[to] = int32_t(first * k + i);
      at[g.pairs + i] = int32_t(to);
      at[2 * g.pairs + to] = e;
    }
    chunks += g.chunks;
    at += g.ints();
    groups.push_back(g);
  }
  return chunks;
}

}  // namespace nt

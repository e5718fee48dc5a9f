// A pass's (row, choice) pairs of a mixture of experts, grouped by rows and
// sorted by expert within each group, in chunks of a few pairs of one expert:
// what a GPU pass that computes every expert in one launch a matrix takes
// (matvec_expert_chunks). Plain host arithmetic, included by CUDA code too.
#pragma once

#include <cstdint>
#include <vector>

namespace nt {

// Consecutive pairs of a group sorted by expert, all of one expert's.
struct ExpertChunk {
  int32_t expert = 0, first = 0, count = 0;
};

// A group of consecutive rows, its records from `at`, laid out for one copy
// to the GPU: the pairs sorted by expert (each a pair index row * k + choice,
// by expert ascending, then pair ascending), each pair's place in that order
// (by its index within the group), each sorted pair's expert, then the chunks.
struct PairGroup {
  int64_t first_row = 0, rows = 0, pairs = 0, chunks = 0;
  int32_t* at = nullptr;

  const int32_t* sorted() const { return at; }
  const int32_t* place() const { return at + pairs; }
  const int32_t* expert_of() const { return at + 2 * pairs; }
  const ExpertChunk* chunk_list() const { return reinterpret_cast<const ExpertChunk*>(at + 3 * pairs); }
  int64_t ints() const { return 3 * pairs + 3 * chunks; }
};

// Ints of records a pair may take: its three, and a chunk's three.
constexpr int64_t kPairGroupInts = 6;

// Groups the n rows' pairs (chosen [n][k], experts below n_experts) by
// rows_per_group rows, sorts each group's by expert and cuts each expert's
// run into chunks of at most chunk_pairs, writing the records from `records`
// (room for kPairGroupInts * n * k ints). Returns the chunks of all groups.
int64_t group_pairs_by_expert(const int32_t* chosen, int64_t n, int64_t k, int64_t n_experts, int64_t rows_per_group,
                              int64_t chunk_pairs, int32_t* records, std::vector<PairGroup>& groups);

}  // namespace nt

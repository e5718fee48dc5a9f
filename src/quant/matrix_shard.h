// A tensor-parallel shard of a weight matrix in the file layout: a range of
// rows (each output row whole), or a range of columns (each row's blocks in
// that range), so a GPU uploads and runs only its shard with the usual
// upload path and kernels. Row shards give a slice of the outputs; column
// shards give partial sums of every output, which an all-reduce adds.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "quant/tensor_type.h"

namespace nt {

enum class ShardAxis { Rows, Columns };

struct MatrixShard {
  ShardAxis axis = ShardAxis::Rows;
  int64_t first = 0, count = 0;  // rows or columns
};

// Throws nt::Error naming `tensor` when the shard is empty or leaves the
// rows x cols matrix, or when a column shard does not start and end on a
// block boundary of `type` (a quantized block cannot be cut).
void check_shard(TensorType type, int64_t rows, int64_t cols, const MatrixShard& shard, std::string_view tensor);

// The shard's bytes in file layout: count x cols (rows) or rows x count (columns).
std::vector<uint8_t> extract_shard(TensorType type, const void* bytes, int64_t rows, int64_t cols,
                                   const MatrixShard& shard, std::string_view tensor);

}  // namespace nt

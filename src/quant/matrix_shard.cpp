#include "quant/matrix_shard.h"

#include <cstring>

#include "core/error.h"

namespace nt {

void check_shard(TensorType type, int64_t rows, int64_t cols, const MatrixShard& shard, std::string_view tensor) {
  const bool by_rows = shard.axis == ShardAxis::Rows;
  const int64_t extent = by_rows ? rows : cols;
  const char* what = by_rows ? "rows" : "columns";
  if (shard.count <= 0 || shard.first < 0 || shard.first + shard.count > extent) {
    fail("{}: shard of {} [{}, {}) is empty or outside its {} {}", tensor, what, shard.first, shard.first + shard.count,
         extent, what);
  }
  const int64_t block = tensor_type_info(type).block_elems;
  if (!by_rows && (shard.first % block != 0 || shard.count % block != 0)) {
    fail("{}: a column shard [{}, {}) of {} must start and end on its blocks of {} columns", tensor, shard.first,
         shard.first + shard.count, tensor_type_name(type), block);
  }
}

std::vector<uint8_t> extract_shard(TensorType type, const void* bytes, int64_t rows, int64_t cols,
                                   const MatrixShard& shard, std::string_view tensor) {
  check_shard(type, rows, cols, shard, tensor);
  const auto* src = static_cast<const uint8_t*>(bytes);
  const size_t row_size = row_bytes(type, cols);
  if (shard.axis == ShardAxis::Rows) {
    const uint8_t* begin = src + size_t(shard.first) * row_size;
    return std::vector<uint8_t>(begin, begin + size_t(shard.count) * row_size);
  }
  const size_t skip = row_bytes(type, shard.first), width = row_bytes(type, shard.count);
  std::vector<uint8_t> out(width * size_t(rows));
  for (int64_t r = 0; r < rows; ++r) std::memcpy(out.data() + size_t(r) * width, src + size_t(r) * row_size + skip, width);
  return out;
}

}  // namespace nt

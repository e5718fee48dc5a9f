// Shards of quantized matrices: dequantizing a row or column shard gives
// exactly those rows or columns of the dequantized whole matrix, and cuts
// that split a block or leave the matrix are errors naming the tensor.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "core/error.h"
#include "quant/matrix_shard.h"
#include "quant/quant.h"

namespace nt {
namespace {

struct Matrix {
  std::vector<uint8_t> bytes;
  std::vector<float> values;  // dequantized, rows x cols
};

Matrix random_matrix(TensorType type, int64_t rows, int64_t cols) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<float> x(size_t(rows * cols));
  for (float& v : x) v = dist(rng);
  Matrix m;
  m.bytes.resize(row_bytes(type, cols) * size_t(rows));
  for (int64_t r = 0; r < rows; ++r) quantize_row(type, x.data() + r * cols, m.bytes.data() + size_t(r) * row_bytes(type, cols), cols);
  m.values.resize(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    dequantize_row(type, m.bytes.data() + size_t(r) * row_bytes(type, cols), m.values.data() + r * cols, cols);
  }
  return m;
}

std::vector<float> dequantized(TensorType type, const std::vector<uint8_t>& bytes, int64_t rows, int64_t cols) {
  std::vector<float> out(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    dequantize_row(type, bytes.data() + size_t(r) * row_bytes(type, cols), out.data() + r * cols, cols);
  }
  return out;
}

class MatrixShardTest : public testing::TestWithParam<TensorType> {};

TEST_P(MatrixShardTest, ShardsAreTheRowsAndColumnsOfTheWhole) {
  const TensorType type = GetParam();
  const int64_t block = tensor_type_info(type).block_elems == 256 ? 256 : 32;
  const int64_t rows = 12, cols = 4 * block;
  const Matrix m = random_matrix(type, rows, cols);
  for (const MatrixShard s : {MatrixShard{ShardAxis::Rows, 0, 5}, MatrixShard{ShardAxis::Rows, 5, 7},
                              MatrixShard{ShardAxis::Columns, 0, block}, MatrixShard{ShardAxis::Columns, block, 3 * block}}) {
    SCOPED_TRACE(testing::Message() << tensor_type_name(type) << (s.axis == ShardAxis::Rows ? " rows " : " columns ")
                                    << s.first << "+" << s.count);
    const auto bytes = extract_shard(type, m.bytes.data(), rows, cols, s, "blk.0.ffn_down.weight");
    const bool by_rows = s.axis == ShardAxis::Rows;
    const int64_t shard_rows = by_rows ? s.count : rows, shard_cols = by_rows ? cols : s.count;
    ASSERT_EQ(bytes.size(), row_bytes(type, shard_cols) * size_t(shard_rows));
    const auto got = dequantized(type, bytes, shard_rows, shard_cols);
    for (int64_t r = 0; r < shard_rows; ++r) {
      for (int64_t c = 0; c < shard_cols; ++c) {
        const int64_t whole_r = by_rows ? s.first + r : r, whole_c = by_rows ? c : s.first + c;
        ASSERT_EQ(got[size_t(r * shard_cols + c)], m.values[size_t(whole_r * cols + whole_c)]) << r << "," << c;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, MatrixShardTest,
                         testing::Values(TensorType::F32, TensorType::F16, TensorType::Q4_0, TensorType::Q8_0,
                                         TensorType::Q4_K, TensorType::Q6_K),
                         [](const auto& info) { return std::string(tensor_type_name(info.param)); });

TEST(MatrixShard, ColumnCutsInsideABlockAreErrorsNamingTheTensor) {
  const Matrix m = random_matrix(TensorType::Q4_K, 4, 512);
  for (const MatrixShard s : {MatrixShard{ShardAxis::Columns, 128, 256}, MatrixShard{ShardAxis::Columns, 0, 128}}) {
    try {
      extract_shard(TensorType::Q4_K, m.bytes.data(), 4, 512, s, "blk.3.attn_output.weight");
      ADD_FAILURE() << "a cut at column " << s.first << "+" << s.count << " splits a Q4_K block";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("blk.3.attn_output.weight"), std::string::npos) << what;
      EXPECT_NE(what.find("blocks of 256"), std::string::npos) << what;
    }
  }
}

TEST(MatrixShard, ShardsOutsideTheMatrixAreErrors) {
  const Matrix m = random_matrix(TensorType::Q8_0, 4, 64);
  EXPECT_THROW(extract_shard(TensorType::Q8_0, m.bytes.data(), 4, 64, {ShardAxis::Rows, 3, 2}, "w"), Error);
  EXPECT_THROW(extract_shard(TensorType::Q8_0, m.bytes.data(), 4, 64, {ShardAxis::Rows, 0, 0}, "w"), Error);
  EXPECT_THROW(extract_shard(TensorType::Q8_0, m.bytes.data(), 4, 64, {ShardAxis::Columns, 32, 64}, "w"), Error);
  EXPECT_THROW(extract_shard(TensorType::Q8_0, m.bytes.data(), 4, 64, {ShardAxis::Columns, -32, 32}, "w"), Error);
}

}  // namespace
}  // namespace nt

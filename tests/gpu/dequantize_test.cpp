// Whole-row decoding (the GEMM path's f16 copy and the embedding gather)
// against the CPU reference decoder.
#include <gtest/gtest.h>

#include "backend/cuda/kernels/dequantize.h"
#include "gpu_test_util.h"

namespace nt {
namespace {

class DequantizeTest : public testing::TestWithParam<TensorType> {};

// Decodes rows [first, first + n) of a random rows x cols matrix to f16 and
// counts the elements that differ from the reference rounded to f16.
int f16_row_mismatches(TensorType type, int64_t rows, int64_t cols, int64_t first, int64_t n, uint64_t staging_bytes) {
  const auto bytes = test::random_weights(type, rows, cols);
  const auto ref = test::dequantize_matrix(type, bytes, rows, cols);
  const test::DeviceWeights dw = test::upload_weights(type, bytes, rows, cols, staging_bytes);
  DeviceBuffer out = test::poisoned(size_t(n * cols) * 2);
  dequantize_rows_f16(dw.m, first, n, out.as<uint16_t>(), nullptr);
  const auto got = test::to_host<uint16_t>(out, size_t(n * cols));
  int mismatches = 0;
  for (int64_t i = 0; i < n * cols; ++i) {
    const float want = fp16_to_fp32(fp32_to_fp16(ref[size_t(first * cols + i)]));
    const float have = fp16_to_fp32(got[size_t(i)]);
    // Decoding reproduces the reference's float operations, so only the f16
    // rounding of an identical value remains: bit-exact.
    if (!(have == want)) ++mismatches;
  }
  return mismatches;
}

TEST_P(DequantizeTest, F16RowsMatchReference) {
  EXPECT_EQ(f16_row_mismatches(GetParam(), 45, 768, 7, 31, 5000), 0) << tensor_type_name(GetParam());  // several staging chunks
}

// Rows wider than one thread block's columns (2048), the last block partly idle.
TEST_P(DequantizeTest, F16WideRowsMatchReference) {
  EXPECT_EQ(f16_row_mismatches(GetParam(), 9, 2560, 2, 6, 1 << 20), 0) << tensor_type_name(GetParam());
}

TEST_P(DequantizeTest, GatherRowsMatchReference) {
  const TensorType type = GetParam();
  const int64_t rows = 50, cols = 512;
  const auto bytes = test::random_weights(type, rows, cols);
  const auto ref = test::dequantize_matrix(type, bytes, rows, cols);
  const test::DeviceWeights dw = test::upload_weights(type, bytes, rows, cols);
  const std::vector<int32_t> ids = {3, 49, 0, 3, 17, 28};
  const DeviceBuffer dids = test::to_device(ids);
  DeviceBuffer out = test::poisoned(ids.size() * size_t(cols) * 4);
  gather_rows_f32(dw.m, dids.as<int32_t>(), int64_t(ids.size()), out.as<float>(), nullptr);
  const auto got = test::to_host<float>(out, ids.size() * size_t(cols));
  int mismatches = 0;
  for (size_t t = 0; t < ids.size(); ++t) {
    for (int64_t c = 0; c < cols; ++c) {
      if (!(got[t * size_t(cols) + size_t(c)] == ref[size_t(ids[t] * cols + c)])) ++mismatches;
    }
  }
  EXPECT_EQ(mismatches, 0) << tensor_type_name(type);
}

INSTANTIATE_TEST_SUITE_P(AllFormats, DequantizeTest, testing::ValuesIn(test::all_weight_types()),
                         [](const auto& info) { return std::string(tensor_type_name(info.param)); });

TEST(DeviceMatrix, RejectsRowsOffTheBlockGrid) {
  EXPECT_THROW(device_matrix_bytes(TensorType::Q4_K, 4, 128), Error);
  EXPECT_THROW(device_matrix_bytes(TensorType::F16, 4, 44), Error);  // float rows: 16-byte multiples
  EXPECT_THROW(device_matrix_bytes(TensorType::F32, 4, 42), Error);
  EXPECT_NO_THROW(device_matrix_bytes(TensorType::F16, 4, 40));
  EXPECT_NO_THROW(device_matrix_bytes(TensorType::F32, 4, 172));
  EXPECT_THROW(device_matrix_bytes(TensorType::Q8_K, 4, 256), Error);
}

}  // namespace
}  // namespace nt

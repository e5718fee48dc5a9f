// Whole-row decoding (the GEMM path's f16 copy and the embedding gather)
// against the CPU reference decoder.
#include <gtest/gtest.h>

#include "backend/cuda/dequantize.h"
#include "gpu_test_util.h"

namespace nt {
namespace {

class DequantizeTest : public testing::TestWithParam<TensorType> {};

TEST_P(DequantizeTest, F16RowsMatchReference) {
  const TensorType type = GetParam();
  const int64_t rows = 45, cols = 768, first = 7, n = 31;
  const auto bytes = test::random_weights(type, rows, cols);
  const auto ref = test::dequantize_matrix(type, bytes, rows, cols);
  const test::DeviceWeights dw = test::upload_weights(type, bytes, rows, cols, 5000);  // several staging chunks
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
  EXPECT_EQ(mismatches, 0) << tensor_type_name(type);
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
  EXPECT_THROW(device_matrix_bytes(TensorType::F16, 4, 40), Error);
  EXPECT_THROW(device_matrix_bytes(TensorType::Q8_K, 4, 256), Error);
}

}  // namespace
}  // namespace nt

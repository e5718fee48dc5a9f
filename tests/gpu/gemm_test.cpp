// Prefill GEMM (f16 decode + cuBLAS) against float64 products.
#include <gtest/gtest.h>

#include "backend/cuda/kernels/gemm.h"
#include "gpu_test_util.h"

namespace nt {
namespace {

class GemmTest : public testing::TestWithParam<TensorType> {};

// Gemm::run with a scratch of scratch_rows f16 rows against float64 products
// of the f16-rounded operands the tensor cores multiply, without and with
// accumulation into y.
void expect_gemm_matches(TensorType type, int64_t rows, int64_t cols, int64_t tokens, int64_t y_stride, int64_t scratch_rows) {
  const auto bytes = test::random_weights(type, rows, cols);
  const auto w = test::dequantize_matrix(type, bytes, rows, cols);
  const auto x = test::random_floats(size_t(tokens * cols));
  const auto base = test::random_floats(size_t(tokens * y_stride));
  const test::DeviceWeights dw = test::upload_weights(type, bytes, rows, cols);
  const DeviceBuffer dx = test::to_device(x);
  DeviceBuffer dx16(x.size() * 2, "x f16");
  convert_f32_to_f16(dx.as<float>(), int64_t(x.size()), dx16.as<uint16_t>(), nullptr);
  Gemm gemm(uint64_t(scratch_rows * cols * 2));
  for (bool accumulate : {false, true}) {
    DeviceBuffer dy = test::to_device(base);
    gemm.run(dw.m, dx16.as<uint16_t>(), tokens, dy.as<float>(), y_stride, accumulate, nullptr);
    const auto y = test::to_host<float>(dy, base.size());
    std::vector<float> got;
    std::vector<double> ref;
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t r = 0; r < y_stride; ++r) {
        double v = accumulate || r >= rows ? double(base[size_t(t * y_stride + r)]) : 0.0;
        if (r < rows) {
          for (int64_t i = 0; i < cols; ++i) {
            v += double(fp16_to_fp32(fp32_to_fp16(w[size_t(r * cols + i)]))) *
                 double(fp16_to_fp32(fp32_to_fp16(x[size_t(t * cols + i)])));
          }
        }
        ref.push_back(v);
        got.push_back(y[size_t(t * y_stride + r)]);
      }
    }
    EXPECT_LT(test::relative_error(got, ref), 1e-5) << tensor_type_name(type) << " accumulate=" << accumulate;
  }
}

TEST_P(GemmTest, MatchesReferenceInRowBlocks) {
  expect_gemm_matches(GetParam(), 133, 512, 70, 150, 40);  // four row blocks of 40, 40, 40, 13
}

// A scratch of 300 rows runs blocks of 256 rows (whole GEMM tiles): 256, 256, 88.
TEST_P(GemmTest, MatchesReferenceInTileRowBlocks) {
  expect_gemm_matches(GetParam(), 600, 256, 9, 610, 300);
}

INSTANTIATE_TEST_SUITE_P(AllFormats, GemmTest, testing::ValuesIn(test::all_weight_types()),
                         [](const auto& info) { return std::string(tensor_type_name(info.param)); });

}  // namespace
}  // namespace nt

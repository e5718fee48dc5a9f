// The int8 tensor-core GEMM against float64 products of the dequantized
// weights and the q8 activations it multiplies, for every format it takes,
// token counts across its tile widths, split-K and not, with accumulation.
#include <gtest/gtest.h>

#include "backend/cuda/cuda_device.h"
#include "backend/cuda/matvec.h"
#include "backend/cuda/quantized_gemm.h"
#include "gpu_test_util.h"

namespace nt {
namespace {

struct Case {
  int64_t rows, cols, tokens;
  uint64_t scratch_bytes;  // 0: no split-K
};

// Runs one GEMM (y = X W^T, then y += X W^T on the result); returns the
// errors against the q8 activations' exact products.
std::vector<double> run_case(TensorType type, const Case& c) {
  const auto bytes = test::random_weights(type, c.rows, c.cols);
  const auto w = test::dequantize_matrix(type, bytes, c.rows, c.cols);
  const auto x = test::random_floats(size_t(c.tokens * c.cols));
  const auto q8 = test::quantize_q8(x);
  const int64_t y_stride = c.rows + 3;  // rows of y wider than the matrix: untouched past it
  const auto base = test::random_floats(size_t(c.tokens * y_stride));

  const test::DeviceWeights dw = test::upload_weights(type, bytes, c.rows, c.cols);
  const DeviceBuffer dx = test::to_device(x);
  DeviceBuffer dq(x.size(), "q8"), ds(x.size() / 32 * 8, "q8 scales");
  quantize_activations(dx.as<float>(), c.tokens, c.cols, dq.as<int8_t>(), ds.as<float2>(), nullptr);
  DeviceBuffer dy = test::to_device(base);
  DeviceBuffer scratch(std::max<uint64_t>(c.scratch_bytes, 4), "split-K partials");

  const int multiprocessors = require_cuda_device(0).multiprocessors;
  std::vector<double> errors;
  std::vector<double> expected(base.begin(), base.end());
  for (bool accumulate : {false, true}) {
    QuantizedGemmParams p;
    p.w = dw.m;
    p.x = {dx.as<float>(), dq.as<int8_t>(), ds.as<float2>()};
    p.n_tokens = c.tokens;
    p.y = dy.as<float>();
    p.y_stride = y_stride;
    p.accumulate = accumulate;
    p.scratch = scratch.as<float>();
    p.scratch_bytes = c.scratch_bytes;
    p.multiprocessors = multiprocessors;
    quantized_gemm(p, nullptr);
    NT_CUDA_CHECK(cudaDeviceSynchronize());
    for (int64_t t = 0; t < c.tokens; ++t) {
      for (int64_t r = 0; r < c.rows; ++r) {
        double v = 0.0;
        for (int64_t i = 0; i < c.cols; ++i) v += double(w[size_t(r * c.cols + i)]) * double(q8.values[size_t(t * c.cols + i)]);
        double& e = expected[size_t(t * y_stride + r)];
        e = accumulate ? e + v : v;
      }
    }
    const auto y = test::to_host<float>(dy, base.size());
    errors.push_back(test::relative_error(y, expected));
  }
  return errors;
}

class QuantizedGemmTest : public testing::TestWithParam<TensorType> {};

TEST_P(QuantizedGemmTest, MatchesQ8ProductsAtEveryTileWidth) {
  const TensorType type = GetParam();
  const bool k_quant = tensor_type_info(type).block_elems == 256;
  // Legacy rows of 17 or 9 blocks end in a short step; 133 and 70 rows end in a short row block.
  const int64_t long_row = k_quant ? 12 * 256 : 17 * 32 * 5, short_row = k_quant ? 256 : 9 * 32;
  const uint64_t split = 64 << 20;
  for (const Case c : {Case{133, long_row, 9, 0}, Case{133, long_row, 9, split}, Case{70, short_row, 1, 0},
                       Case{64, long_row, 16, split}, Case{200, short_row * 2, 31, split}, Case{96, long_row, 64, split},
                       Case{37, long_row, 77, split}, Case{150, long_row, 40, 150 * 40 * 4 * 2}}) {
    SCOPED_TRACE(testing::Message() << tensor_type_name(type) << " " << c.rows << "x" << c.cols << " tokens=" << c.tokens
                                    << " scratch=" << c.scratch_bytes);
    for (const double e : run_case(type, c)) EXPECT_LT(e, 1e-5);  // float32 rounding of exact integer products only
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, QuantizedGemmTest,
                         testing::Values(TensorType::Q4_0, TensorType::Q4_1, TensorType::Q8_0, TensorType::Q4_K, TensorType::Q6_K),
                         [](const auto& info) { return std::string(tensor_type_name(info.param)); });

TEST(QuantizedGemm, SupportsOnlyTheFormatsItHasKernelsFor) {
  EXPECT_TRUE(quantized_gemm_supported(TensorType::Q4_K, 4096));
  EXPECT_FALSE(quantized_gemm_supported(TensorType::Q4_K, 4096 + 32));  // K-quant rows are whole super-blocks
  EXPECT_TRUE(quantized_gemm_supported(TensorType::Q4_1, 576));
  EXPECT_FALSE(quantized_gemm_supported(TensorType::Q5_K, 4096));
  EXPECT_FALSE(quantized_gemm_supported(TensorType::F16, 4096));
  QuantizedGemmParams p;
  p.w.type = TensorType::Q5_K;
  p.w.cols = 4096;
  p.n_tokens = 4;
  p.multiprocessors = 132;  // past the SM check: the format is what it refuses
  EXPECT_THROW(quantized_gemm(p, nullptr), Error);
}

}  // namespace
}  // namespace nt

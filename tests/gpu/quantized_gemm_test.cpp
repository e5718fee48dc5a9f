// The int8 tensor-core GEMM against float64 products of the dequantized
// weights and the q8 activations it multiplies, for every format it takes,
// token counts across its tile widths, split-K and not, with accumulation;
// and its super-block activations (K-quants) against the CPU's Q8_K.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include "backend/cpu/kernels.h"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/kernels/llama_ops.h"
#include "backend/cuda/kernels/matvec.h"
#include "backend/cuda/kernels/quantized_gemm.h"
#include "core/half.h"
#include "gpu_test_util.h"

namespace nt {
namespace {

struct Case {
  int64_t rows, cols, tokens;
  uint64_t scratch_bytes;  // 0: no split-K
  int widest_tile = 64;    // QuantizedGemmParams::widest_tile
};

// Super-block activations of `tokens` rows on the device, and on the host
// the values they stand for (q * d).
struct SuperBlocks {
  DeviceBuffer q8, scales, sums;
  std::vector<float> values;
  SuperBlockActivations view() const { return {q8.as<int8_t>(), scales.as<float>(), sums.as<uint16_t>()}; }
};

SuperBlocks super_blocks(const DeviceBuffer& x, int64_t tokens, int64_t cols) {
  const size_t n = size_t(tokens * cols);
  SuperBlocks a{DeviceBuffer(n, "super q8"), DeviceBuffer(n / 256 * 4, "super scales"), DeviceBuffer(n / 16 * 2, "super sums"), {}};
  quantize_super_blocks(x.as<float>(), tokens, cols, a.q8.as<int8_t>(), a.scales.as<float>(), a.sums.as<uint16_t>(), nullptr);
  NT_CUDA_CHECK(cudaDeviceSynchronize());
  const auto q = test::to_host<int8_t>(a.q8, n);
  const auto d = test::to_host<float>(a.scales, n / 256);
  a.values.resize(n);
  for (size_t i = 0; i < n; ++i) a.values[i] = float(q[i]) * d[i / 256];
  return a;
}

// Runs one GEMM (y = X W^T, then y += X W^T on the result); returns the
// errors against the exact products of the activations it multiplies: the
// per-32 q8, or the super-block ones (`super`, K-quants).
std::vector<double> run_case(TensorType type, const Case& c, bool super = false) {
  const auto bytes = test::random_weights(type, c.rows, c.cols);
  const auto w = test::dequantize_matrix(type, bytes, c.rows, c.cols);
  const auto x = test::random_floats(size_t(c.tokens * c.cols));
  const int64_t y_stride = c.rows + 3;  // rows of y wider than the matrix: untouched past it
  const auto base = test::random_floats(size_t(c.tokens * y_stride));

  const test::DeviceWeights dw = test::upload_weights(type, bytes, c.rows, c.cols);
  const DeviceBuffer dx = test::to_device(x);
  DeviceBuffer dq(x.size(), "q8"), ds(x.size() / 32 * 8, "q8 scales");
  quantize_activations(dx.as<float>(), c.tokens, c.cols, dq.as<int8_t>(), ds.as<float2>(), nullptr);
  const std::optional<SuperBlocks> xs = super ? std::optional(super_blocks(dx, c.tokens, c.cols)) : std::nullopt;
  const std::vector<float> values = super ? xs->values : test::quantize_q8(x).values;
  DeviceBuffer dy = test::to_device(base);
  DeviceBuffer scratch(std::max<uint64_t>(c.scratch_bytes, 4), "split-K partials");

  const int multiprocessors = require_cuda_device(0).multiprocessors;
  std::vector<double> errors;
  std::vector<double> expected(base.begin(), base.end());
  for (bool accumulate : {false, true}) {
    QuantizedGemmParams p;
    p.w = dw.m;
    p.x = {dx.as<float>(), dq.as<int8_t>(), ds.as<float2>()};
    if (xs) p.xs = xs->view();
    p.n_tokens = c.tokens;
    p.y = dy.as<float>();
    p.y_stride = y_stride;
    p.accumulate = accumulate;
    p.scratch = scratch.as<float>();
    p.scratch_bytes = c.scratch_bytes;
    p.multiprocessors = multiprocessors;
    p.widest_tile = c.widest_tile;
    quantized_gemm(p, nullptr);
    NT_CUDA_CHECK(cudaDeviceSynchronize());
    for (int64_t t = 0; t < c.tokens; ++t) {
      for (int64_t r = 0; r < c.rows; ++r) {
        double v = 0.0;
        for (int64_t i = 0; i < c.cols; ++i) v += double(w[size_t(r * c.cols + i)]) * double(values[size_t(t * c.cols + i)]);
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

// Shapes across the tile widths, split-K and not, short steps, row blocks and
// token tiles; K-quants of up to 4 tokens on super-block activations take
// the narrow form (1 and 4 tokens, a short row tile).
std::vector<Case> cases(TensorType type) {
  const bool k_quant = tensor_type_info(type).block_elems == 256;
  // Legacy rows of 17 or 9 blocks end in a short step; 133 and 70 rows end in a short row block.
  const int64_t long_row = k_quant ? 12 * 256 : 17 * 32 * 5, short_row = k_quant ? 256 : 9 * 32;
  const uint64_t split = 64 << 20;
  return {Case{133, long_row, 9, 0},  Case{133, long_row, 9, split},           Case{70, short_row, 1, 0},
          Case{64, long_row, 16, split}, Case{200, short_row * 2, 31, split},  Case{96, long_row, 64, split},
          Case{37, long_row, 77, split}, Case{150, long_row, 40, 150 * 40 * 4 * 2},
          // Several 32-token tiles where 64-token ones would run.
          Case{96, long_row, 64, split, 32}, Case{133, long_row, 45, 0, 32}, Case{133, long_row, 4, 0}};
}

TEST_P(QuantizedGemmTest, MatchesQ8ProductsAtEveryTileWidth) {
  const TensorType type = GetParam();
  for (const Case c : cases(type)) {
    SCOPED_TRACE(testing::Message() << tensor_type_name(type) << " " << c.rows << "x" << c.cols << " tokens=" << c.tokens
                                    << " scratch=" << c.scratch_bytes << " widest tile=" << c.widest_tile);
    for (const double e : run_case(type, c)) EXPECT_LT(e, 1e-5);  // float32 rounding of exact integer products only
  }
}

// Super-block activations: the integer sums of a step and the f16 mma of the
// Q4_K/Q5_K mins are exact, so only the float conversions per step round.
TEST(QuantizedGemm, SuperBlockActivationsMatchTheirProductsAtEveryTileWidth) {
  for (const TensorType type : {TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K}) {
    for (const Case c : cases(type)) {
      SCOPED_TRACE(testing::Message() << tensor_type_name(type) << " " << c.rows << "x" << c.cols << " tokens=" << c.tokens
                                      << " scratch=" << c.scratch_bytes << " widest tile=" << c.widest_tile);
      for (const double e : run_case(type, c, true)) EXPECT_LT(e, 1e-5);
    }
  }
}

// quantize_super_blocks rounds as the CPU's Q8_K activations do (the scalar
// kernel), bit for bit: codes, scales, and the 16-element sums.
TEST(QuantizedGemm, SuperBlocksRoundAsTheCpusQ8K) {
  const int64_t tokens = 5, cols = 3 * 256;
  auto x = test::random_floats(size_t(tokens * cols), -3.0f, 3.0f);
  std::fill(x.begin() + 256, x.begin() + 512, 0.0f);  // an all-zero super-block: d = 0, codes 0
  const DeviceBuffer dx = test::to_device(x);
  const SuperBlocks a = super_blocks(dx, tokens, cols);
  std::vector<BlockQ8_K> want(size_t(tokens * cols / 256));
  cpu::kernels_for(cpu::Isa::Scalar).quantize_q8_k(x.data(), want.data(), tokens * cols);
  const auto q = test::to_host<int8_t>(a.q8, x.size());
  const auto d = test::to_host<float>(a.scales, want.size());
  const auto sums = test::to_host<uint16_t>(a.sums, want.size() * 16);
  for (size_t b = 0; b < want.size(); ++b) {
    SCOPED_TRACE(testing::Message() << "super-block " << b);
    EXPECT_EQ(d[b], want[b].d);
    EXPECT_EQ(std::memcmp(q.data() + b * 256, want[b].qs, 256), 0);
    for (int g = 0; g < 16; ++g) EXPECT_EQ(fp16_to_fp32(sums[b * 16 + size_t(g)]), float(want[b].bsums[g])) << "group " << g;
  }
  EXPECT_GT(*std::max_element(d.begin(), d.end()), 0.0f);
}

INSTANTIATE_TEST_SUITE_P(Formats, QuantizedGemmTest,
                         testing::Values(TensorType::Q4_0, TensorType::Q4_1, TensorType::Q8_0, TensorType::Q2_K, TensorType::Q3_K,
                                         TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K),
                         [](const auto& info) { return std::string(tensor_type_name(info.param)); });

// The gated form (gate and up in one launch, silu(gate) * up as q8 in its
// epilogue) against the two GEMMs, swiglu and quantize_activations it
// replaces: the same splits, so the same sums in the same order and the same
// bits. Unsplit (a GPU of one multiprocessor for the split rule), split, and
// a short last row block and token tile; more than 4 tokens, where Q4_K's
// separate launches would take the narrow form.
TEST(QuantizedGemm, GatedFormWritesWhatTheSeparateLaunchesDo) {
  struct GatedCase {
    int64_t rows, cols, tokens;
    int multiprocessors;
  };
  const int sms = require_cuda_device(0).multiprocessors;
  for (const auto& [type, super] : {std::pair{TensorType::Q4_K, false}, std::pair{TensorType::Q6_K, false},
                                   std::pair{TensorType::Q4_1, false}, std::pair{TensorType::Q3_K, false},
                                   std::pair{TensorType::Q2_K, false},
                                   std::pair{TensorType::Q4_K, true},
                                   std::pair{TensorType::Q5_K, true}, std::pair{TensorType::Q6_K, true}}) {
    for (const GatedCase c : {GatedCase{512, 1024, 9, 1}, GatedCase{512, 2048, 64, sms}, GatedCase{96, 512, 37, sms}}) {
      SCOPED_TRACE(testing::Message() << tensor_type_name(type) << (super ? " super-blocks " : " ") << c.rows << "x" << c.cols
                                      << " tokens=" << c.tokens << " multiprocessors=" << c.multiprocessors);
      const test::DeviceWeights gate = test::upload_weights(type, test::random_weights(type, c.rows, c.cols), c.rows, c.cols);
      const test::DeviceWeights up = test::upload_weights(type, test::random_weights(type, c.rows, c.cols), c.rows, c.cols);
      const DeviceBuffer dx = test::to_device(test::random_floats(size_t(c.tokens * c.cols)));
      DeviceBuffer dq(size_t(c.tokens * c.cols), "q8"), ds(size_t(c.tokens * c.cols / 32) * 8, "q8 scales");
      quantize_activations(dx.as<float>(), c.tokens, c.cols, dq.as<int8_t>(), ds.as<float2>(), nullptr);
      const std::optional<SuperBlocks> xs = super ? std::optional(super_blocks(dx, c.tokens, c.cols)) : std::nullopt;
      DeviceBuffer scratch(64 << 20, "split-K partials");
      const size_t outputs = size_t(c.tokens * c.rows);
      DeviceBuffer g(outputs * 4, "gate"), u(outputs * 4, "up"), h(outputs * 4, "h"), h_gated(outputs * 4, "gated h");
      DeviceBuffer q(outputs, "h q8"), qs(outputs / 32 * 8, "h q8 scales"), q_gated(outputs, "gated q8"),
          qs_gated(outputs / 32 * 8, "gated q8 scales");
      QuantizedGemmParams p;
      p.x = {dx.as<float>(), dq.as<int8_t>(), ds.as<float2>()};
      if (xs) p.xs = xs->view();
      p.n_tokens = c.tokens;
      p.y_stride = c.rows;
      p.scratch = scratch.as<float>();
      p.scratch_bytes = scratch.size();
      p.multiprocessors = c.multiprocessors;
      for (const auto& [m, y] : {std::pair{gate.m, g.as<float>()}, std::pair{up.m, u.as<float>()}}) {
        p.w = m;
        p.y = y;
        quantized_gemm(p, nullptr);
      }
      swiglu(g.as<float>(), u.as<float>(), int64_t(outputs), h.as<float>(), nullptr);
      quantize_activations(h.as<float>(), c.tokens, c.rows, q.as<int8_t>(), qs.as<float2>(), nullptr);
      p.w = gate.m;
      p.w_up = up.m;
      p.y = h_gated.as<float>();
      p.y_q8 = q_gated.as<int8_t>();
      p.y_q8_scales = qs_gated.as<float2>();
      quantized_gemm(p, nullptr);
      NT_CUDA_CHECK(cudaDeviceSynchronize());
      EXPECT_EQ(test::to_host<float>(h_gated, outputs), test::to_host<float>(h, outputs));
      EXPECT_EQ(test::to_host<int8_t>(q_gated, outputs), test::to_host<int8_t>(q, outputs));
      const auto scales = test::to_host<float>(qs_gated, outputs / 16), want_scales = test::to_host<float>(qs, outputs / 16);
      EXPECT_EQ(scales, want_scales);
      EXPECT_GT(*std::max_element(want_scales.begin(), want_scales.end()), 0.0f) << "h is not all zeros";
    }
  }
}

// The narrow form (Q4_K and Q5_K on super-block activations, up to 4 tokens): its
// gated launch writes h as its two separate launches and swiglu do, bit for
// bit (each row's sums in the same warp order); 1 to 4 tokens, rows of one
// and of several steps a warp.
TEST(QuantizedGemm, NarrowGatedFormWritesWhatTheSeparateLaunchesDo) {
  struct NarrowCase {
    int64_t rows, cols, tokens;
  };
  const int sms = require_cuda_device(0).multiprocessors;
  for (const TensorType type : {TensorType::Q4_K, TensorType::Q5_K}) {
    for (const NarrowCase c : {NarrowCase{96, 2048, 1}, NarrowCase{512, 1024, 4}, NarrowCase{160, 4608, 3}, NarrowCase{96, 512, 2}}) {
      SCOPED_TRACE(testing::Message() << tensor_type_name(type) << " " << c.rows << "x" << c.cols << " tokens=" << c.tokens);
      const test::DeviceWeights gate = test::upload_weights(type, test::random_weights(type, c.rows, c.cols), c.rows, c.cols);
      const test::DeviceWeights up = test::upload_weights(type, test::random_weights(type, c.rows, c.cols), c.rows, c.cols);
      const DeviceBuffer dx = test::to_device(test::random_floats(size_t(c.tokens * c.cols)));
      const SuperBlocks xs = super_blocks(dx, c.tokens, c.cols);
      const size_t outputs = size_t(c.tokens * c.rows);
      DeviceBuffer g(outputs * 4, "gate"), u(outputs * 4, "up"), h(outputs * 4, "h"), h_gated(outputs * 4, "gated h");
      QuantizedGemmParams p;
      p.xs = xs.view();
      p.n_tokens = c.tokens;
      p.y_stride = c.rows;
      p.multiprocessors = sms;
      for (const auto& [m, y] : {std::pair{gate.m, g.as<float>()}, std::pair{up.m, u.as<float>()}}) {
        p.w = m;
        p.y = y;
        quantized_gemm(p, nullptr);
      }
      swiglu(g.as<float>(), u.as<float>(), int64_t(outputs), h.as<float>(), nullptr);
      p.w = gate.m;
      p.w_up = up.m;
      p.y = h_gated.as<float>();
      quantized_gemm(p, nullptr);
      NT_CUDA_CHECK(cudaDeviceSynchronize());
      const auto want = test::to_host<float>(h, outputs);
      EXPECT_EQ(test::to_host<float>(h_gated, outputs), want);
      EXPECT_GT(*std::max_element(want.begin(), want.end()), 0.0f) << "h is not all zeros";
    }
  }
}

TEST(QuantizedGemm, GatedFormRefusesMatricesThatDiffer) {
  QuantizedGemmParams p;
  p.w.type = p.w_up.type = TensorType::Q4_K;
  p.w.rows = 256;
  p.w_up.rows = 128;
  p.w.cols = p.w_up.cols = 1024;
  p.n_tokens = 8;
  p.multiprocessors = 132;
  int8_t q8 = 0;
  float2 scale{};
  p.y_q8 = &q8;
  p.y_q8_scales = &scale;
  EXPECT_THROW(quantized_gemm(p, nullptr), Error);
}

TEST(QuantizedGemm, SupportsOnlyTheFormatsItHasKernelsFor) {
  EXPECT_TRUE(quantized_gemm_supported(TensorType::Q4_K, 4096));
  EXPECT_FALSE(quantized_gemm_supported(TensorType::Q4_K, 4096 + 32));  // K-quant rows are whole super-blocks
  EXPECT_TRUE(quantized_gemm_supported(TensorType::Q4_1, 576));
  EXPECT_TRUE(quantized_gemm_supported(TensorType::Q5_K, 4096));
  EXPECT_TRUE(quantized_gemm_supported(TensorType::Q3_K, 4096));
  EXPECT_TRUE(quantized_gemm_supported(TensorType::Q2_K, 4096));
  EXPECT_FALSE(quantized_gemm_supported(TensorType::Q5_0, 4096));
  EXPECT_FALSE(quantized_gemm_supported(TensorType::F16, 4096));
  QuantizedGemmParams p;
  p.w.type = TensorType::Q5_0;
  p.w.cols = 4096;
  p.n_tokens = 4;
  p.multiprocessors = 132;  // past the SM check: the format is what it refuses
  EXPECT_THROW(quantized_gemm(p, nullptr), Error);
}

}  // namespace
}  // namespace nt

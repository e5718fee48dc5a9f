// Mat-vec for every weight format against the CPU reference decoder
// (quant.h) with float64 dot products.
#include <gtest/gtest.h>

#include "backend/cuda/matvec.h"
#include "gpu_test_util.h"

namespace nt {
namespace {

using test::relative_error;

struct Case {
  TensorType type;
  int64_t rows, cols;
  int columns;
  bool gated = false, residual = false;
};

// Runs one mat-vec on fresh random data; returns {error vs the exact
// activations, error vs the activations as the kernel sees them (q8 values
// for quantized formats)}.
std::pair<double, double> run_case(const Case& c) {
  const auto bytes = test::random_weights(c.type, c.rows, c.cols);
  const auto bytes_up = test::random_weights(c.type, c.rows, c.cols);
  const auto w = test::dequantize_matrix(c.type, bytes, c.rows, c.cols);
  const auto w_up = test::dequantize_matrix(c.type, bytes_up, c.rows, c.cols);
  const auto x = test::random_floats(size_t(c.columns * c.cols));
  const auto q8 = test::quantize_q8(x);
  const auto residual = test::random_floats(size_t(c.columns * c.rows));

  const test::DeviceWeights dw = test::upload_weights(c.type, bytes, c.rows, c.cols);
  const test::DeviceWeights dw_up = test::upload_weights(c.type, bytes_up, c.rows, c.cols);
  const DeviceBuffer dx = test::to_device(x);
  DeviceBuffer dq(x.size(), "q8"), ds(x.size() / 32 * 8, "q8 scales");
  quantize_activations(dx.as<float>(), c.columns, c.cols, dq.as<int8_t>(), ds.as<float2>(), nullptr);
  DeviceBuffer dy = c.residual ? test::to_device(residual) : test::poisoned(residual.size() * 4);

  MatvecParams p;
  p.w = dw.m;
  if (c.gated) p.w_up = dw_up.m;
  p.x = {dx.as<float>(), dq.as<int8_t>(), ds.as<float2>()};
  p.y = dy.as<float>();
  p.y_stride = c.rows;
  p.residual = c.residual ? dy.as<float>() : nullptr;
  matvec(p, c.columns, nullptr);
  const auto y = test::to_host<float>(dy, residual.size());

  const bool q8_input = matvec_wants_q8(c.type);
  auto reference = [&](const std::vector<float>& xs) {
    std::vector<double> ref(residual.size());
    for (int col = 0; col < c.columns; ++col) {
      for (int64_t r = 0; r < c.rows; ++r) {
        double a = 0.0, b = 0.0;
        for (int64_t i = 0; i < c.cols; ++i) {
          a += double(w[size_t(r * c.cols + i)]) * double(xs[size_t(col * c.cols + i)]);
          b += double(w_up[size_t(r * c.cols + i)]) * double(xs[size_t(col * c.cols + i)]);
        }
        double v = c.gated ? a / (1.0 + std::exp(-a)) * b : a;
        if (c.residual) v += double(residual[size_t(col * c.rows + r)]);
        ref[size_t(col * c.rows + r)] = v;
      }
    }
    return ref;
  };
  return {relative_error(y, reference(x)), relative_error(y, reference(q8_input ? q8.values : x))};
}

class MatvecTest : public testing::TestWithParam<TensorType> {};

TEST_P(MatvecTest, MatchesReferenceForEveryColumnCount) {
  const TensorType type = GetParam();
  const int64_t row_block = tensor_type_info(type).block_elems == 256 ? 256 : 32;
  // 17 blocks of 256 (or 136 of 32) leaves a remainder after the unrolled lane steps.
  for (const Case c : {Case{type, 133, 17 * 256, 1}, Case{type, 40, row_block * 3, 2}, Case{type, 61, 2048, 3},
                       Case{type, 37, 1024, 8}, Case{type, 29, 512, 5, true}, Case{type, 70, 1024, 1, false, true},
                       Case{type, 19, 256, 4, true, true}, Case{type, 11, 256, 6}, Case{type, 9, 256, 7}}) {
    SCOPED_TRACE(testing::Message() << tensor_type_name(type) << " " << c.rows << "x" << c.cols << " columns=" << c.columns
                                    << " gated=" << c.gated << " residual=" << c.residual);
    const auto [exact_error, seen_error] = run_case(c);
    // As the kernel sees its inputs, only float32 rounding remains; against the
    // exact activations, q8 activation rounding costs about 0.5%.
    EXPECT_LT(seen_error, test::is_float_type(type) ? 1e-5 : 1e-4);
    EXPECT_LT(exact_error, test::is_float_type(type) ? 1e-5 : 3e-2);
  }
}

INSTANTIATE_TEST_SUITE_P(AllFormats, MatvecTest, testing::ValuesIn(test::all_weight_types()),
                         [](const auto& info) { return std::string(tensor_type_name(info.param)); });

TEST(Matvec, RejectsMissingActivations) {
  const auto bytes = test::random_weights(TensorType::Q4_K, 4, 256);
  const test::DeviceWeights dw = test::upload_weights(TensorType::Q4_K, bytes, 4, 256);
  DeviceBuffer y(16, "y");
  MatvecParams p;
  p.w = dw.m;
  p.y = y.as<float>();
  p.y_stride = 4;
  EXPECT_THROW(matvec(p, 1, nullptr), Error);
}

TEST(Matvec, QuantizedActivationsMatchTheCpuRule) {
  const auto x = test::random_floats(64 * 37, -3.0f, 3.0f);
  const auto ref = test::quantize_q8(x);
  const DeviceBuffer dx = test::to_device(x);
  DeviceBuffer dq = test::poisoned(x.size()), ds = test::poisoned(x.size() / 32 * 8);
  quantize_activations(dx.as<float>(), 37, 64, dq.as<int8_t>(), ds.as<float2>(), nullptr);
  const auto q = test::to_host<int8_t>(dq, x.size());
  const auto s = test::to_host<float>(ds, x.size() / 32 * 2);
  EXPECT_EQ(q, ref.q);
  for (size_t b = 0; b < ref.d.size(); ++b) {
    EXPECT_FLOAT_EQ(s[2 * b], ref.d[b]);
    EXPECT_FLOAT_EQ(s[2 * b + 1], ref.s[b]);
  }
}

}  // namespace
}  // namespace nt

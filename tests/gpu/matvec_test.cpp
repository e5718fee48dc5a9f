// Mat-vec for every weight format against the CPU reference decoder
// (quant.h) with float64 dot products.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <utility>

#include "backend/cuda/kernels/matvec.h"
#include "gpu_test_util.h"

namespace nt {
namespace {

using test::relative_error;

struct Case {
  TensorType type;
  int64_t rows, cols;
  int columns;
  bool gated = false, residual = false;
  int warps_per_row = 0, rows_per_warp = 0;
};

// Runs one mat-vec on fresh random data; returns {error vs the exact
// activations, error vs the activations as the kernel sees them (q8 values
// for quantized formats)}.
std::pair<double, double> run_case(const Case& c) {
  const auto bytes = test::random_weights(c.type, c.rows, c.cols);
  const auto bytes_up = test::random_weights(c.type, c.rows, c.cols);
  const auto w = test::dequantize_matrix(c.type, bytes, c.rows, c.cols);
  const auto w_up = test::dequantize_matrix(c.type, bytes_up, c.rows, c.cols);
  auto x = test::random_floats(size_t(c.columns * c.cols));
  if (c.gated) {
    // Random codes make gate products of several hundred, where silu is
    // e^-300-small or linear and its float32 value all rounding: scale the
    // activations so they have an RMS of 3, as a real SwiGLU's roughly do.
    double sumsq = 0.0;
    for (int col = 0; col < c.columns; ++col) {
      for (int64_t r = 0; r < c.rows; ++r) {
        double a = 0.0;
        for (int64_t i = 0; i < c.cols; ++i) a += double(w[size_t(r * c.cols + i)]) * double(x[size_t(col * c.cols + i)]);
        sumsq += a * a;
      }
    }
    const double scale = 3.0 / std::sqrt(sumsq / double(c.columns * c.rows));
    for (float& v : x) v = float(double(v) * scale);
  }
  const auto q8 = test::quantize_q8(x);
  const auto residual = test::random_floats(size_t(c.columns * c.rows));

  const test::DeviceWeights dw = test::upload_weights(c.type, bytes, c.rows, c.cols);
  const test::DeviceWeights dw_up = test::upload_weights(c.type, bytes_up, c.rows, c.cols);
  const DeviceBuffer dx = test::to_device(x);
  const bool q8_input = matvec_wants_q8(c.type);
  DeviceBuffer dq(x.size(), "q8"), ds(x.size() / 32 * 8 + 8, "q8 scales");
  if (q8_input) quantize_activations(dx.as<float>(), c.columns, c.cols, dq.as<int8_t>(), ds.as<float2>(), nullptr);
  DeviceBuffer dy = c.residual ? test::to_device(residual) : test::poisoned(residual.size() * 4);

  MatvecParams p;
  p.w = dw.m;
  if (c.gated) p.w_up = dw_up.m;
  p.x = {dx.as<float>(), dq.as<int8_t>(), ds.as<float2>()};
  p.y = dy.as<float>();
  p.y_stride = c.rows;
  p.residual = c.residual ? dy.as<float>() : nullptr;
  p.warps_per_row = c.warps_per_row;
  p.rows_per_warp = c.rows_per_warp;
  matvec(p, c.columns, nullptr);
  const auto y = test::to_host<float>(dy, residual.size());

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
  // 17 blocks of 256 (or 136 of 32) leaves a remainder after the unrolled lane
  // steps, gated too (the gated Q4_K decode has its own 64-element units).
  for (const Case c : {Case{type, 133, 17 * 256, 1}, Case{type, 133, 17 * 256, 1, true}, Case{type, 40, row_block * 3, 2},
                       Case{type, 61, 2048, 3}, Case{type, 37, 1024, 8}, Case{type, 29, 512, 5, true}, Case{type, 70, 1024, 1, false, true},
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

// Float rows need only be 16-byte multiples (stories260K's FFN rows are 172
// wide), so the float mat-vec must handle row lengths off the 32-element grid.
TEST(Matvec, FloatRowsOffTheBlockGridMatchReference) {
  for (const auto& [type, cols] : {std::pair{TensorType::F32, int64_t(172)}, std::pair{TensorType::F32, int64_t(4)},
                                   std::pair{TensorType::F32, int64_t(44)}, std::pair{TensorType::F16, int64_t(40)},
                                   std::pair{TensorType::F16, int64_t(8)}, std::pair{TensorType::BF16, int64_t(168)}}) {
    for (const Case c : {Case{type, 45, cols, 1}, Case{type, 45, cols, 3, true}, Case{type, 13, cols, 2, false, true}}) {
      SCOPED_TRACE(testing::Message() << tensor_type_name(type) << " " << c.rows << "x" << c.cols << " columns=" << c.columns
                                      << " gated=" << c.gated << " residual=" << c.residual);
      EXPECT_LT(run_case(c).first, 1e-5);
    }
  }
}

// Decode splits a row over 1, 2 or 4 warps and (ungated) gives a warp one
// or two rows; row counts that leave a block partly empty or a warp's second
// row missing, and a unit count that is no multiple of the threads per row.
TEST(Matvec, EveryWarpsPerRowVariantMatchesReference) {
  for (TensorType type : {TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K, TensorType::Q3_K, TensorType::Q8_0,
                          TensorType::Q4_0, TensorType::F16}) {
    for (int split : {1, 2, 4}) {
      for (const Case c : {Case{type, 133, 17 * 256, 1, false, false, split, 1}, Case{type, 133, 17 * 256, 1, false, false, split, 2},
                           Case{type, 7, 2048, 1, true, false, split}, Case{type, 70, 1024, 1, false, true, split, 2},
                           Case{type, 9, 512, 1, false, true, split, 2}, Case{type, 5, 256, 1, true, true, split}}) {
        SCOPED_TRACE(testing::Message() << tensor_type_name(type) << " " << c.rows << "x" << c.cols << " warps_per_row=" << split
                                        << " rows_per_warp=" << c.rows_per_warp << " gated=" << c.gated
                                        << " residual=" << c.residual);
        // Against the activations the kernel sees (the q8 rounding bound is
        // checked above on larger matrices; on 5-9 rows it is noisy).
        EXPECT_LT(run_case(c).second, test::is_float_type(type) ? 1e-5 : 1e-4);
      }
    }
  }
}

// Launches of 2 to 4 columns may pair rows over two warps (MatvecParams);
// odd row counts leave a warp's second row or a block partly empty.
TEST(Matvec, PairedColumnLaunchesMatchReference) {
  for (TensorType type : {TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K, TensorType::Q8_0, TensorType::Q4_0,
                          TensorType::Q4_1, TensorType::F16, TensorType::F32}) {
    for (const Case c : {Case{type, 133, 17 * 256, 2, false, false, 2, 2}, Case{type, 61, 2048, 3, false, true, 2, 2},
                         Case{type, 9, 512, 4, false, false, 2, 2}, Case{type, 70, 1024, 4, false, true, 2, 2}}) {
      SCOPED_TRACE(testing::Message() << tensor_type_name(type) << " " << c.rows << "x" << c.cols << " columns=" << c.columns
                                      << " residual=" << c.residual);
      EXPECT_LT(run_case(c).second, test::is_float_type(type) ? 1e-5 : 1e-4);
    }
  }
}

TEST(Matvec, RejectsSplitsAndRowPairsItCannotRun) {
  const auto bytes = test::random_weights(TensorType::Q4_K, 4, 256);
  const test::DeviceWeights dw = test::upload_weights(TensorType::Q4_K, bytes, 4, 256);
  DeviceBuffer x(2 * 256, "x"), s(2 * 8 * 8, "scales"), y(32, "y");
  MatvecParams p;
  p.w = dw.m;
  p.x.q8 = x.as<int8_t>();
  p.x.q8_scales = s.as<float2>();
  p.y = y.as<float>();
  p.y_stride = 4;
  p.warps_per_row = 2;
  EXPECT_THROW(matvec(p, 2, nullptr), Error);  // several columns: one warp a row, or rows paired over two
  p.warps_per_row = 0;
  p.rows_per_warp = 2;
  EXPECT_THROW(matvec(p, 2, nullptr), Error);
  EXPECT_THROW(matvec_stepwise(p, 2, nullptr), Error);  // stepwise columns keep a split, not a row pairing
  p.warps_per_row = 2;
  EXPECT_NO_THROW(matvec(p, 2, nullptr));
  EXPECT_THROW(matvec(p, kMatvecPairedMaxColumns + 1, nullptr), Error);
  p.rows_per_warp = 3;
  EXPECT_THROW(matvec(p, 1, nullptr), Error);
}

// Q, K and V in one launch: outputs side by side, formats mixed as in the
// K-quant mixes, and shapes the fused kernel cannot take (fallback per part).
TEST(Matvec, PartsMatchTheReferenceSideBySide) {
  using T = TensorType;
  struct PartCase {
    std::vector<std::pair<T, int64_t>> parts;  // type, rows
    int64_t cols;
  };
  for (const PartCase& pc : {PartCase{{{T::Q4_K, 64}, {T::Q4_K, 16}, {T::Q6_K, 16}}, 512},
                             PartCase{{{T::Q6_K, 8}, {T::Q4_K, 24}}, 17 * 256},
                             PartCase{{{T::Q5_K, 32}, {T::Q6_K, 8}, {T::Q6_K, 8}}, 256},
                             PartCase{{{T::Q3_K, 16}, {T::Q4_K, 4}, {T::Q5_K, 4}}, 768},
                             PartCase{{{T::Q4_K, 30}, {T::Q6_K, 6}}, 256},
                             PartCase{{{T::Q8_0, 8}, {T::Q4_K, 8}, {T::Q6_K, 8}}, 256},
                             PartCase{{{T::Q4_K, 12}}, 256}}) {
    const auto x = test::random_floats(size_t(pc.cols));
    const auto q8 = test::quantize_q8(x);
    const DeviceBuffer dx = test::to_device(x);
    DeviceBuffer dq(x.size(), "q8"), ds(x.size() / 32 * 8, "q8 scales");
    quantize_activations(dx.as<float>(), 1, pc.cols, dq.as<int8_t>(), ds.as<float2>(), nullptr);
    MatvecPartsParams p;
    std::vector<test::DeviceWeights> weights;
    std::vector<double> ref;
    std::string name;
    for (auto [type, rows] : pc.parts) {
      const auto bytes = test::random_weights(type, rows, pc.cols);
      const auto w = test::dequantize_matrix(type, bytes, rows, pc.cols);
      weights.push_back(test::upload_weights(type, bytes, rows, pc.cols));
      p.part[p.n_parts++] = {weights.back().m, int64_t(ref.size())};
      for (int64_t r = 0; r < rows; ++r) {
        double a = 0.0;
        for (int64_t i = 0; i < pc.cols; ++i) a += double(w[size_t(r * pc.cols + i)]) * double(q8.values[size_t(i)]);
        ref.push_back(a);
      }
      name += fmt::format("{}x{} ", tensor_type_name(type), rows);
    }
    SCOPED_TRACE(name + std::to_string(pc.cols));
    DeviceBuffer dy = test::poisoned(ref.size() * 4);
    p.x = {dx.as<float>(), dq.as<int8_t>(), ds.as<float2>()};
    p.y = dy.as<float>();
    matvec_parts(p, nullptr);
    EXPECT_LT(relative_error(test::to_host<float>(dy, ref.size()), ref), 1e-4);
  }
}

// A residual-writing mat-vec that also writes the next RMSNorm's input
// (NormOut): q8 of y * weight by the CPU rule, and each 32 rows' sum of squares.
TEST(Matvec, NormOutputIsTheQuantizedWeightedResidual) {
  for (TensorType type : {TensorType::Q4_K, TensorType::Q6_K, TensorType::Q5_K, TensorType::Q8_0, TensorType::Q4_0}) {
    for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{64, 17 * 256}, std::pair<int64_t, int64_t>{96, 512}}) {
      SCOPED_TRACE(testing::Message() << tensor_type_name(type) << " " << rows << "x" << cols);
      const auto bytes = test::random_weights(type, rows, cols);
      const auto w = test::dequantize_matrix(type, bytes, rows, cols);
      const test::DeviceWeights dw = test::upload_weights(type, bytes, rows, cols);
      const auto x = test::random_floats(size_t(cols));
      const auto q8 = test::quantize_q8(x);
      const auto residual = test::random_floats(size_t(rows));
      const auto norm_weight = test::random_floats(size_t(rows), 0.5f, 1.5f);
      const DeviceBuffer dx = test::to_device(x), dw_norm = test::to_device(norm_weight);
      DeviceBuffer dq(x.size(), "q8"), ds(x.size() / 32 * 8, "q8 scales");
      quantize_activations(dx.as<float>(), 1, cols, dq.as<int8_t>(), ds.as<float2>(), nullptr);
      DeviceBuffer dy = test::to_device(residual);
      DeviceBuffer out_q = test::poisoned(size_t(rows)), out_s = test::poisoned(size_t(rows) / 32 * 8),
                   out_sumsq = test::poisoned(size_t(rows) / 32 * 4);

      MatvecParams p;
      p.w = dw.m;
      p.x = {nullptr, dq.as<int8_t>(), ds.as<float2>()};
      p.y = dy.as<float>();
      p.y_stride = rows;
      p.residual = dy.as<float>();
      p.norm_out = {dw_norm.as<float>(), out_q.as<int8_t>(), out_s.as<float2>(), out_sumsq.as<float>()};
      matvec(p, 1, nullptr);
      const auto y = test::to_host<float>(dy, size_t(rows));

      std::vector<double> ref(static_cast<size_t>(rows));
      for (int64_t r = 0; r < rows; ++r) {
        double a = double(residual[size_t(r)]);
        for (int64_t i = 0; i < cols; ++i) a += double(w[size_t(r * cols + i)]) * double(q8.values[size_t(i)]);
        ref[size_t(r)] = a;
      }
      EXPECT_LT(relative_error(y, ref), 1e-4);

      std::vector<float> weighted(static_cast<size_t>(rows));
      for (size_t r = 0; r < weighted.size(); ++r) weighted[r] = y[r] * norm_weight[r];
      const test::Q8 expected = test::quantize_q8(weighted);
      EXPECT_EQ(test::to_host<int8_t>(out_q, size_t(rows)), expected.q);
      const auto scales = test::to_host<float>(out_s, size_t(rows) / 32 * 2);
      const auto sumsq = test::to_host<float>(out_sumsq, size_t(rows) / 32);
      for (size_t g = 0; g < expected.d.size(); ++g) {
        EXPECT_FLOAT_EQ(scales[2 * g], expected.d[g]);
        EXPECT_FLOAT_EQ(scales[2 * g + 1], expected.s[g]);
        double ss = 0.0;
        for (size_t i = 0; i < 32; ++i) ss += double(y[g * 32 + i]) * double(y[g * 32 + i]);
        EXPECT_NEAR(sumsq[g], ss, 1e-5 * ss);
      }
    }
  }
}

// The consumer side (NormIn): q8(h * weight) in, products scaled by
// rsqrt(mean(h^2) + eps) from the group sums; plain, gated and parts launches
// against float64 on the normalized activations.
TEST(Matvec, NormInputScalesByTheRmsOfTheGroupSums) {
  constexpr int64_t kCols = 1024, kRows = 48;
  constexpr float kEps = 1e-5f;
  const auto h = test::random_floats(size_t(kCols), -3.0f, 3.0f);
  const auto norm_weight = test::random_floats(size_t(kCols), 0.5f, 1.5f);
  std::vector<float> weighted(h.size()), group_sumsq(h.size() / 32);
  double sumsq = 0.0;
  for (size_t i = 0; i < h.size(); ++i) {
    weighted[i] = h[i] * norm_weight[i];
    group_sumsq[i / 32] += h[i] * h[i];
    sumsq += double(h[i]) * double(h[i]);
  }
  const double inv = 1.0 / std::sqrt(sumsq / double(kCols) + double(kEps));
  const test::Q8 q8 = test::quantize_q8(weighted);
  const DeviceBuffer dweighted = test::to_device(weighted), dsums = test::to_device(group_sumsq);
  DeviceBuffer dq(size_t(kCols), "q8"), ds(size_t(kCols) / 32 * 8, "q8 scales");
  quantize_activations(dweighted.as<float>(), 1, kCols, dq.as<int8_t>(), ds.as<float2>(), nullptr);
  const Activations x{nullptr, dq.as<int8_t>(), ds.as<float2>()};
  const NormIn norm_in{dsums.as<float>(), kEps};

  // Row r of each matrix dotted with the activations as the kernel sees them
  // and with the exact normalized ones.
  auto reference = [&](const std::vector<float>& w, int64_t r, bool exact) {
    double a = 0.0;
    for (int64_t i = 0; i < kCols; ++i) {
      const double xi = exact ? double(weighted[size_t(i)]) : double(q8.values[size_t(i)]);
      a += double(w[size_t(r * kCols + i)]) * xi * inv;
    }
    return a;
  };
  for (TensorType type : {TensorType::Q4_K, TensorType::Q6_K, TensorType::Q8_0}) {
    SCOPED_TRACE(tensor_type_name(type));
    const auto bytes = test::random_weights(type, kRows, kCols), bytes_up = test::random_weights(type, kRows, kCols);
    const auto w = test::dequantize_matrix(type, bytes, kRows, kCols);
    const auto w_up = test::dequantize_matrix(type, bytes_up, kRows, kCols);
    const test::DeviceWeights dw = test::upload_weights(type, bytes, kRows, kCols);
    const test::DeviceWeights dw_up = test::upload_weights(type, bytes_up, kRows, kCols);
    for (bool gated : {false, true}) {
      SCOPED_TRACE(gated ? "gated" : "plain");
      DeviceBuffer dy = test::poisoned(size_t(kRows) * 4);
      MatvecParams p;
      p.w = dw.m;
      if (gated) p.w_up = dw_up.m;
      p.x = x;
      p.norm_in = norm_in;
      p.y = dy.as<float>();
      p.y_stride = kRows;
      matvec(p, 1, nullptr);
      std::vector<double> seen(static_cast<size_t>(kRows)), exact(static_cast<size_t>(kRows));
      for (int64_t r = 0; r < kRows; ++r) {
        for (bool e : {false, true}) {
          const double a = reference(w, r, e), b = reference(w_up, r, e);
          (e ? exact : seen)[size_t(r)] = gated ? a / (1.0 + std::exp(-a)) * b : a;
        }
      }
      const auto y = test::to_host<float>(dy, size_t(kRows));
      EXPECT_LT(relative_error(y, seen), 1e-4);
      EXPECT_LT(relative_error(y, exact), 3e-2);
    }
    MatvecPartsParams pp;
    pp.part[pp.n_parts++] = {dw.m, 0};
    pp.part[pp.n_parts++] = {dw_up.m, kRows};
    pp.x = x;
    pp.norm_in = norm_in;
    DeviceBuffer dy = test::poisoned(size_t(2 * kRows) * 4);
    pp.y = dy.as<float>();
    matvec_parts(pp, nullptr);
    std::vector<double> seen;
    for (const auto* m : {&w, &w_up}) {
      for (int64_t r = 0; r < kRows; ++r) seen.push_back(reference(*m, r, false));
    }
    EXPECT_LT(relative_error(test::to_host<float>(dy, seen.size()), seen), 1e-4);
  }
}

TEST(Matvec, RejectsNormOutputsItCannotWrite) {
  const auto bytes = test::random_weights(TensorType::Q4_K, 40, 256);
  const test::DeviceWeights dw = test::upload_weights(TensorType::Q4_K, bytes, 40, 256);
  DeviceBuffer x(256, "x"), s(8 * 8, "scales"), y(40 * 4, "y"), q(64, "q"), qs(16, "qs"), ss(8, "ss"), nw(160, "w");
  MatvecParams p;
  p.w = dw.m;
  p.x = {nullptr, x.as<int8_t>(), s.as<float2>()};
  p.y = y.as<float>();
  p.y_stride = 40;
  p.norm_out = {nw.as<float>(), q.as<int8_t>(), qs.as<float2>(), ss.as<float>()};
  EXPECT_THROW(matvec(p, 1, nullptr), Error);  // 40 rows: not whole groups of 32
  p.w.rows = 32;
  p.norm_out.group_sumsq = nullptr;
  EXPECT_THROW(matvec(p, 1, nullptr), Error);
  p.norm_out.group_sumsq = ss.as<float>();
  EXPECT_THROW(matvec(p, 2, nullptr), Error);  // one column only
}

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

// Stepwise mat-vec: every column of matvec_stepwise (and matvec_parts_stepwise)
// must be bit for bit what the one-column launch computes for that column
// alone, for every format, row split, the gated form, residuals and the
// folded norms on either side, with each column in blocks of its own (small
// launches) or every thread looping over the columns (wide ones): a
// speculative verification pass then gives each token the numbers of a
// one-token decode step.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/kernels/matvec.h"
#include "gpu_test_util.h"

namespace nt {
namespace {

struct StepCase {
  TensorType type;
  int64_t rows, cols, columns;
  bool gated = false, residual = false, norm_in = false, norm_out = false;
  int warps_per_row = 0;
};

std::string describe(const StepCase& c) {
  return std::string(tensor_type_name(c.type)) + " " + std::to_string(c.rows) + "x" + std::to_string(c.cols) + " columns " +
         std::to_string(c.columns) + (c.gated ? " gated" : "") + (c.residual ? " residual" : "") +
         (c.norm_in ? " norm-in" : "") + (c.norm_out ? " norm-out" : "") + " warps/row " + std::to_string(c.warps_per_row);
}

template <typename T>
bool same_bits(const DeviceBuffer& a, const DeviceBuffer& b, size_t n) {
  const auto ha = test::to_host<T>(a, n), hb = test::to_host<T>(b, n);
  return std::memcmp(ha.data(), hb.data(), n * sizeof(T)) == 0;
}

// What one launch writes: y, and the norm output when asked for.
struct Outputs {
  DeviceBuffer y, q8, scales, sumsq;
};

Outputs fresh_outputs(const StepCase& c, const std::vector<float>& residual) {
  Outputs o;
  o.y = c.residual ? test::to_device(residual) : test::poisoned(residual.size() * 4);
  const size_t groups = size_t(c.columns * c.rows / 32);
  o.q8 = test::poisoned(size_t(c.columns * c.rows));
  o.scales = test::poisoned(groups * 8 + 8);
  o.sumsq = test::poisoned(groups * 4 + 4);
  return o;
}

void expect_columns_as_one(const StepCase& c) {
  SCOPED_TRACE(describe(c));
  const bool q8 = matvec_wants_q8(c.type);
  const auto bytes = test::random_weights(c.type, c.rows, c.cols), bytes_up = test::random_weights(c.type, c.rows, c.cols);
  const test::DeviceWeights w = test::upload_weights(c.type, bytes, c.rows, c.cols);
  const test::DeviceWeights w_up = test::upload_weights(c.type, bytes_up, c.rows, c.cols);
  const DeviceBuffer x = test::to_device(test::random_floats(size_t(c.columns * c.cols)));
  DeviceBuffer xq(size_t(c.columns * c.cols), "q8"), xs(size_t(c.columns * c.cols / 32) * 8 + 8, "q8 scales");
  if (q8) quantize_activations(x.as<float>(), c.columns, c.cols, xq.as<int8_t>(), xs.as<float2>(), nullptr);
  // Per-column group sums of squares as a folded norm's producer writes them.
  const DeviceBuffer sums = test::to_device(test::random_floats(size_t(c.columns * c.cols / 32) + 1, 4.0f, 64.0f));
  const DeviceBuffer norm_weight = test::to_device(test::random_floats(size_t(c.rows), 0.5f, 1.5f));
  const auto residual = test::random_floats(size_t(c.columns * c.rows));

  MatvecParams p;
  p.w = w.m;
  if (c.gated) p.w_up = w_up.m;
  p.x = {x.as<float>(), q8 ? xq.as<int8_t>() : nullptr, q8 ? xs.as<float2>() : nullptr};
  p.y_stride = c.rows;
  p.warps_per_row = c.warps_per_row;
  if (c.norm_in) p.norm_in = {sums.as<float>(), 1e-5f};
  const auto wire = [&](MatvecParams& q, Outputs& o) {
    q.y = o.y.as<float>();
    q.residual = c.residual ? q.y : nullptr;
    if (c.norm_out) q.norm_out = {norm_weight.as<float>(), o.q8.as<int8_t>(), o.scales.as<float2>(), o.sumsq.as<float>()};
  };

  Outputs stepwise = fresh_outputs(c, residual), alone = fresh_outputs(c, residual);
  MatvecParams all = p;
  wire(all, stepwise);
  matvec_stepwise(all, c.columns, nullptr);
  for (int64_t col = 0; col < c.columns; ++col) {
    MatvecParams one = p;
    wire(one, alone);
    one.x.f32 += col * c.cols;
    if (q8) {
      one.x.q8 += col * c.cols;
      one.x.q8_scales += col * c.cols / 32;
    }
    if (c.norm_in) one.norm_in.group_sumsq += col * c.cols / 32;
    one.y += col * c.rows;
    if (c.residual) one.residual = one.y;
    if (c.norm_out) {
      one.norm_out.q8 += col * c.rows;
      one.norm_out.q8_scales += col * c.rows / 32;
      one.norm_out.group_sumsq += col * c.rows / 32;
    }
    matvec(one, 1, nullptr);
  }
  EXPECT_TRUE(same_bits<float>(stepwise.y, alone.y, residual.size())) << "outputs";
  if (c.norm_out) {
    const size_t groups = size_t(c.columns * c.rows / 32);
    EXPECT_TRUE(same_bits<int8_t>(stepwise.q8, alone.q8, size_t(c.columns * c.rows))) << "norm output codes";
    EXPECT_TRUE(same_bits<float>(stepwise.scales, alone.scales, 2 * groups)) << "norm output scales";
    EXPECT_TRUE(same_bits<float>(stepwise.sumsq, alone.sumsq, groups)) << "norm output sums of squares";
  }
}

class StepwiseMatvecTest : public testing::TestWithParam<TensorType> {};

TEST_P(StepwiseMatvecTest, EveryColumnIsTheOneColumnLaunch) {
  const TensorType type = GetParam();
  const bool q8 = matvec_wants_q8(type);
  const int64_t block = tensor_type_info(type).block_elems == 256 ? 256 : 32;
  // Row lengths whose default split is 1, 2 and 4 warps for every format
  // (4 to 64 elements a unit), columns up to past one launch's 8, and the
  // narrower launch's 4.
  for (const int64_t cols : {4 * block, int64_t(64 * 256), int64_t(128 * 256)}) {
    for (const int64_t columns : {2, 4, 8, 9}) {
      expect_columns_as_one({type, 37, cols, columns});
      expect_columns_as_one({type, 64, cols, columns, true, false, q8});
    }
  }
  for (const int warps : {1, 2, 4}) {
    for (const int64_t columns : {3, 17}) {
      expect_columns_as_one({type, 45, 8 * block, columns, false, true, false, false, warps});
      expect_columns_as_one({type, 45, 8 * block, columns, true, false, q8, false, warps});
    }
  }
  // Launches too wide for the GPU to hold at once loop over the columns in
  // every thread; the ones above give each column its own blocks.
  for (const int64_t columns : {2, 9}) {
    expect_columns_as_one({type, 16384, 8 * block, columns, false, true});
    expect_columns_as_one({type, 16384, 8 * block, columns, true});
    if (q8) expect_columns_as_one({type, 8192, 8 * block, columns, false, true, true, true});
  }
  if (!q8) return;
  // The folded norms as a decode layer uses them: wo and down write the next
  // norm's input (with the residual), Q/K/V, gate/up and the head read it.
  for (const int64_t columns : {4, 5, 8, 11}) {
    expect_columns_as_one({type, 64, 8 * block, columns, false, true, false, true});
    expect_columns_as_one({type, 96, 64 * 256, columns, false, true, true, true});
    expect_columns_as_one({type, 32, 8 * block, columns, false, false, true});
  }
}

INSTANTIATE_TEST_SUITE_P(AllFormats, StepwiseMatvecTest, testing::ValuesIn(test::all_weight_types()),
                         [](const auto& info) { return std::string(tensor_type_name(info.param)); });

// Q, K and V side by side: the fused launch of the K-quant mixes (its row
// split taken from 32-element units), and parts it cannot fuse (one mat-vec each).
TEST(StepwiseMatvec, PartsGiveEachColumnTheOneColumnLaunch) {
  using T = TensorType;
  struct PartCase {
    std::vector<std::pair<T, int64_t>> parts;  // type, rows
    int64_t cols;
  };
  for (const PartCase& pc : {PartCase{{{T::Q4_K, 64}, {T::Q4_K, 16}, {T::Q6_K, 16}}, 512},
                             PartCase{{{T::Q3_K, 16}, {T::Q4_K, 4}, {T::Q5_K, 4}}, 64 * 256},
                             PartCase{{{T::Q5_K, 32}, {T::Q6_K, 8}, {T::Q6_K, 8}}, 256},
                             PartCase{{{T::Q8_0, 8}, {T::Q4_K, 8}, {T::Q6_K, 8}}, 256},
                             PartCase{{{T::Q4_1, 960}}, 576}, PartCase{{{T::Q4_K, 12}}, 256}}) {
    for (const bool norm_in : {false, true}) {
      for (const int64_t columns : {3, 9}) {
        MatvecPartsParams p;
        std::vector<test::DeviceWeights> weights;
        int64_t width = 0;
        std::string name;
        for (const auto& [type, rows] : pc.parts) {
          weights.push_back(test::upload_weights(type, test::random_weights(type, rows, pc.cols), rows, pc.cols));
          p.part[p.n_parts++] = {weights.back().m, width};
          width += rows;
          name += std::string(tensor_type_name(type)) + "x" + std::to_string(rows) + " ";
        }
        SCOPED_TRACE(name + std::to_string(pc.cols) + " columns " + std::to_string(columns) + (norm_in ? " norm-in" : ""));
        const DeviceBuffer x = test::to_device(test::random_floats(size_t(columns * pc.cols)));
        DeviceBuffer xq(size_t(columns * pc.cols), "q8"), xs(size_t(columns * pc.cols / 32) * 8, "q8 scales");
        quantize_activations(x.as<float>(), columns, pc.cols, xq.as<int8_t>(), xs.as<float2>(), nullptr);
        const DeviceBuffer sums = test::to_device(test::random_floats(size_t(columns * pc.cols / 32), 4.0f, 64.0f));
        p.x = {x.as<float>(), xq.as<int8_t>(), xs.as<float2>()};
        if (norm_in) p.norm_in = {sums.as<float>(), 1e-5f};
        const size_t outputs = size_t(columns * width);
        DeviceBuffer stepwise = test::poisoned(outputs * 4), alone = test::poisoned(outputs * 4);
        p.y = stepwise.as<float>();
        matvec_parts_stepwise(p, columns, width, nullptr);
        for (int64_t col = 0; col < columns; ++col) {
          MatvecPartsParams one = p;
          one.x = {x.as<float>() + col * pc.cols, xq.as<int8_t>() + col * pc.cols, xs.as<float2>() + col * pc.cols / 32};
          if (norm_in) one.norm_in.group_sumsq = sums.as<float>() + col * pc.cols / 32;
          one.y = alone.as<float>() + col * width;
          matvec_parts(one, nullptr);
        }
        EXPECT_TRUE(same_bits<float>(stepwise, alone, outputs));
      }
    }
  }
}

}  // namespace
}  // namespace nt

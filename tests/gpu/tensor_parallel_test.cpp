// Tensor-parallel shards on one GPU, run one after another: row shards of a
// matrix give its output rows, column shards give partial sums whose sum is
// its output, for the decode mat-vec (plain and gated) and the prefill GEMM,
// against the unsharded kernel on the same inputs. Tolerances are those of
// matvec_test and gemm_test: only float32 summation order differs.
#include <gtest/gtest.h>

#include <string>

#include "backend/cuda/kernels/gemm.h"
#include "backend/cuda/kernels/matvec.h"
#include "gpu_test_util.h"
#include "quant/matrix_shard.h"

namespace nt {
namespace {

double tolerance(TensorType type) { return test::is_float_type(type) ? 1e-5 : 1e-4; }

// x [columns][cols] and its q8 form on the device, for the kernels.
struct DeviceActivations {
  DeviceBuffer f32, q8, scales;
  Activations view() const { return {f32.as<float>(), q8.as<int8_t>(), scales.as<float2>()}; }
};

DeviceActivations upload_activations(const std::vector<float>& x, int columns, int64_t cols, TensorType type) {
  DeviceActivations a;
  a.f32 = test::to_device(x);
  a.q8 = DeviceBuffer(x.size(), "q8");
  a.scales = DeviceBuffer(x.size() / 32 * 8 + 8, "q8 scales");
  if (matvec_wants_q8(type)) quantize_activations(a.f32.as<float>(), columns, cols, a.q8.as<int8_t>(), a.scales.as<float2>(), nullptr);
  return a;
}

// Columns [first, first + count) of each of the `columns` rows of x.
std::vector<float> column_slice(const std::vector<float>& x, int columns, int64_t cols, int64_t first, int64_t count) {
  std::vector<float> out;
  for (int c = 0; c < columns; ++c) out.insert(out.end(), x.begin() + c * cols + first, x.begin() + c * cols + first + count);
  return out;
}

std::vector<double> as_double(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

// y = W x (gated: silu(W x) * (W_up x)) through matvec, into rows x columns.
std::vector<float> run_matvec(const DeviceMatrix& w, const DeviceMatrix* w_up, const Activations& x, int columns,
                              int64_t out_rows, int64_t first_row = 0, DeviceBuffer* into = nullptr) {
  DeviceBuffer own;
  if (!into) {
    own = test::poisoned(size_t(out_rows * columns) * 4);
    into = &own;
  }
  MatvecParams p;
  p.w = w;
  if (w_up) p.w_up = *w_up;
  p.x = x;
  p.y = into->as<float>() + first_row;
  p.y_stride = out_rows;
  matvec(p, columns, nullptr);
  return test::to_host<float>(*into, size_t(out_rows * columns));
}

class TensorParallelTest : public testing::TestWithParam<TensorType> {};

TEST_P(TensorParallelTest, MatvecRowShardsGiveTheOutputRows) {
  const TensorType type = GetParam();
  const int64_t rows = 96, cols = tensor_type_info(type).block_elems == 256 ? 1024 : 512;
  for (bool gated : {false, true}) {
    for (int columns : {1, 3}) {
      SCOPED_TRACE(testing::Message() << tensor_type_name(type) << " gated=" << gated << " columns=" << columns);
      const auto bytes = test::random_weights(type, rows, cols), bytes_up = test::random_weights(type, rows, cols);
      // Small activations keep the gate's silu away from saturation (see matvec_test).
      const auto x = test::random_floats(size_t(columns * cols), -0.1f, 0.1f);
      const DeviceActivations dx = upload_activations(x, columns, cols, type);
      const auto whole = test::upload_weights(type, bytes, rows, cols), whole_up = test::upload_weights(type, bytes_up, rows, cols);
      const auto expected = run_matvec(whole.m, gated ? &whole_up.m : nullptr, dx.view(), columns, rows);

      DeviceBuffer sharded = test::poisoned(size_t(rows * columns) * 4);
      std::vector<float> got;
      for (const MatrixShard s : {MatrixShard{ShardAxis::Rows, 0, 40}, MatrixShard{ShardAxis::Rows, 40, 56}}) {
        const auto w = test::upload_weights(type, extract_shard(type, bytes.data(), rows, cols, s, "w"), s.count, cols);
        const auto w_up = test::upload_weights(type, extract_shard(type, bytes_up.data(), rows, cols, s, "w_up"), s.count, cols);
        got = run_matvec(w.m, gated ? &w_up.m : nullptr, dx.view(), columns, rows, s.first, &sharded);
      }
      EXPECT_LT(test::relative_error(got, as_double(expected)), tolerance(type));
    }
  }
}

TEST_P(TensorParallelTest, MatvecColumnShardPartialSumsAddToTheOutput) {
  const TensorType type = GetParam();
  const int64_t block = tensor_type_info(type).block_elems == 256 ? 256 : 32;
  const int64_t rows = 70, cols = 8 * block;
  for (int columns : {1, 4}) {
    SCOPED_TRACE(testing::Message() << tensor_type_name(type) << " columns=" << columns);
    const auto bytes = test::random_weights(type, rows, cols);
    const auto x = test::random_floats(size_t(columns * cols));
    const auto whole = test::upload_weights(type, bytes, rows, cols);
    const auto expected = run_matvec(whole.m, nullptr, upload_activations(x, columns, cols, type).view(), columns, rows);

    // Uneven shards, as budgets of different sizes give; each GPU would hold
    // its own slice of the activations, quantized by itself.
    std::vector<float> sum(size_t(rows * columns), 0.0f);
    for (const MatrixShard s : {MatrixShard{ShardAxis::Columns, 0, 3 * block}, MatrixShard{ShardAxis::Columns, 3 * block, 5 * block}}) {
      const auto w = test::upload_weights(type, extract_shard(type, bytes.data(), rows, cols, s, "w"), rows, s.count);
      const auto xs = column_slice(x, columns, cols, s.first, s.count);
      const auto partial = run_matvec(w.m, nullptr, upload_activations(xs, columns, s.count, type).view(), columns, rows);
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += partial[i];  // what the all-reduce does
    }
    EXPECT_LT(test::relative_error(sum, as_double(expected)), tolerance(type));
  }
}

// Y = X W^T of `tokens` tokens through Gemm, with y_stride = rows.
std::vector<float> run_gemm(const DeviceMatrix& w, const std::vector<float>& x, int64_t tokens, int64_t cols, int64_t out_rows,
                            int64_t first_row = 0, DeviceBuffer* into = nullptr) {
  const DeviceBuffer dx = test::to_device(x);
  DeviceBuffer dx16(x.size() * 2, "x f16");
  convert_f32_to_f16(dx.as<float>(), int64_t(x.size()), dx16.as<uint16_t>(), nullptr);
  DeviceBuffer own;
  if (!into) {
    own = test::poisoned(size_t(out_rows * tokens) * 4);
    into = &own;
  }
  Gemm gemm(uint64_t(64 * cols * 2));
  gemm.run(w, dx16.as<uint16_t>(), tokens, into->as<float>() + first_row, out_rows, false, nullptr);
  return test::to_host<float>(*into, size_t(out_rows * tokens));
}

TEST_P(TensorParallelTest, GemmRowAndColumnShardsMatchTheWhole) {
  const TensorType type = GetParam();
  const int64_t block = tensor_type_info(type).block_elems == 256 ? 256 : 32;
  const int64_t rows = 150, cols = 4 * block, tokens = 37;
  const auto bytes = test::random_weights(type, rows, cols);
  const auto x = test::random_floats(size_t(tokens * cols));
  const auto whole = test::upload_weights(type, bytes, rows, cols);
  const auto expected = as_double(run_gemm(whole.m, x, tokens, cols, rows));

  DeviceBuffer by_rows = test::poisoned(size_t(rows * tokens) * 4);
  std::vector<float> got;
  for (const MatrixShard s : {MatrixShard{ShardAxis::Rows, 0, 90}, MatrixShard{ShardAxis::Rows, 90, 60}}) {
    const auto w = test::upload_weights(type, extract_shard(type, bytes.data(), rows, cols, s, "w"), s.count, cols);
    got = run_gemm(w.m, x, tokens, cols, rows, s.first, &by_rows);
  }
  EXPECT_LT(test::relative_error(got, expected), 1e-5) << "row shards";

  std::vector<float> sum(size_t(rows * tokens), 0.0f);
  for (const MatrixShard s : {MatrixShard{ShardAxis::Columns, 0, block}, MatrixShard{ShardAxis::Columns, block, 3 * block}}) {
    const auto w = test::upload_weights(type, extract_shard(type, bytes.data(), rows, cols, s, "w"), rows, s.count);
    const auto partial = run_gemm(w.m, column_slice(x, int(tokens), cols, s.first, s.count), tokens, s.count, rows);
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += partial[i];
  }
  EXPECT_LT(test::relative_error(sum, expected), 1e-5) << "column shards";
}

INSTANTIATE_TEST_SUITE_P(AllFormats, TensorParallelTest, testing::ValuesIn(test::all_weight_types()),
                         [](const auto& info) { return std::string(tensor_type_name(info.param)); });

}  // namespace
}  // namespace nt

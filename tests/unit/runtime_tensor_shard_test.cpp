// The tensor split's shard ranges: a two-GPU split's row shards of Q and
// ffn_gate/up feed exactly the column shards of attn_output and ffn_down, so
// the column-cut products' partial sums add up to the uncut product.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "quant/matrix_shard.h"
#include "runtime/tensor_shard.h"

namespace nt {
namespace {

ModelSpec small_gqa() {
  ModelSpec c;
  c.n_layers = 1;
  c.dim = 24;
  c.n_heads = 6;
  c.n_kv_heads = 3;
  c.head_dim = 4;
  c.ffn_dim = 20;
  return c;
}

struct Matrix {
  int64_t rows = 0, cols = 0;
  std::vector<float> v;
};

Matrix random_matrix(int64_t rows, int64_t cols, std::mt19937& rng) {
  std::normal_distribution<float> normal;
  Matrix m{rows, cols, std::vector<float>(size_t(rows * cols))};
  for (float& x : m.v) x = normal(rng);
  return m;
}

Matrix shard_of(const Matrix& m, const MatrixShard& s) {
  const auto bytes = extract_shard(TensorType::F32, m.v.data(), m.rows, m.cols, s, "test");
  Matrix out{s.axis == ShardAxis::Rows ? s.count : m.rows, s.axis == ShardAxis::Rows ? m.cols : s.count, {}};
  out.v.resize(bytes.size() / 4);
  std::memcpy(out.v.data(), bytes.data(), bytes.size());
  return out;
}

std::vector<double> times(const Matrix& m, const std::vector<double>& x) {
  std::vector<double> y(size_t(m.rows), 0.0);
  for (int64_t r = 0; r < m.rows; ++r)
    for (int64_t c = 0; c < m.cols; ++c) y[size_t(r)] += double(m.v[size_t(r * m.cols + c)]) * x[size_t(c)];
  return y;
}

// The product `out * (in * x)` uncut, and summed over the shards' partial products.
void expect_partials_add_up(const ModelSpec& full, const std::vector<TensorShard>& shards, LayerMatrix in_kind,
                            LayerMatrix out_kind, const Matrix& in, const Matrix& out, const std::vector<double>& x) {
  const std::vector<double> want = times(out, times(in, x));
  std::vector<double> got(want.size(), 0.0);
  for (const TensorShard& s : shards) {
    const std::vector<double> part = times(shard_of(out, layer_matrix_shard(full, s, out_kind)),
                                           times(shard_of(in, layer_matrix_shard(full, s, in_kind)), x));
    for (size_t i = 0; i < got.size(); ++i) got[i] += part[i];
  }
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-9 * (1 + std::fabs(want[i]))) << i;
}

TEST(TensorShard, ColumnCutPartialsAddUpToTheUncutProduct) {
  const ModelSpec c = small_gqa();
  std::mt19937 rng(7);
  std::vector<double> x(size_t(c.dim));
  for (double& v : x) v = std::normal_distribution<double>()(rng);
  // Uneven shares: 2 + 1 KV heads, 12 + 8 FFN columns.
  const std::vector<TensorShard> shards = {{0, 2, 0, 12}, {2, 1, 12, 8}};
  const Matrix wq = random_matrix(c.q_dim(), c.dim, rng), wo = random_matrix(c.dim, c.q_dim(), rng);
  expect_partials_add_up(c, shards, LayerMatrix::Q, LayerMatrix::Output, wq, wo, x);
  const Matrix up = random_matrix(c.ffn_dim, c.dim, rng), down = random_matrix(c.dim, c.ffn_dim, rng);
  expect_partials_add_up(c, shards, LayerMatrix::Up, LayerMatrix::Down, up, down, x);
  expect_partials_add_up(c, shards, LayerMatrix::Gate, LayerMatrix::Down, up, down, x);
}

TEST(TensorShard, ShardConfigKeepsEachKvHeadsQueryGroup) {
  const ModelSpec c = small_gqa();
  const TensorShard s{1, 2, 12, 8};
  const ModelSpec sc = shard_config(c, s);
  EXPECT_EQ(sc.n_kv_heads, 2);
  EXPECT_EQ(sc.n_heads, 4);
  EXPECT_EQ(sc.ffn_dim, 8);
  EXPECT_EQ(sc.dim, c.dim);
  EXPECT_EQ(sc.head_dim, c.head_dim);
  // K and V rows of KV heads 1-2; Q rows of query heads 2-5.
  const MatrixShard k = layer_matrix_shard(c, s, LayerMatrix::K), q = layer_matrix_shard(c, s, LayerMatrix::Q);
  EXPECT_EQ(k.first, 1 * c.head_dim);
  EXPECT_EQ(k.count, sc.kv_dim());
  EXPECT_EQ(q.first, 2 * c.head_dim);
  EXPECT_EQ(q.count, sc.q_dim());
}

TEST(TensorShard, ShardsOutsideTheModelAreErrors) {
  const ModelSpec c = small_gqa();
  for (const TensorShard& s : {TensorShard{2, 2, 0, 8}, TensorShard{0, 0, 0, 8}, TensorShard{0, 1, 16, 8}}) {
    try {
      shard_config(c, s);
      ADD_FAILURE() << "heads [" << s.first_kv_head << ", +" << s.kv_heads << "), columns [" << s.first_ffn_column << ", +"
                    << s.ffn_columns << ")";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("tensor split"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace nt

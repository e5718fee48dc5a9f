// The CPU mixture of experts: one token's routing, the block against a direct
// float64 sum over each token's experts, and a batch giving every token the
// very numbers it gets alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/moe_ffn.h"
#include "quant/quant.h"

namespace nt::cpu {
namespace {

TEST(MoeRouting, TopKOfTheSoftmaxRenormalized) {
  std::vector<float> logits{0.5f, 2.0f, -1.0f, 1.0f};
  int32_t experts[2];
  float weights[2];
  route_token(ExpertGating::SoftmaxTopK, logits.data(), 4, 2, experts, weights);
  EXPECT_EQ(experts[0], 1);
  EXPECT_EQ(experts[1], 3);
  // softmax then renormalizing over the two chosen is the softmax of their logits.
  EXPECT_NEAR(weights[0], 1.0 / (1.0 + std::exp(-1.0)), 1e-6);
  EXPECT_NEAR(weights[0] + weights[1], 1.0, 1e-6);
}

// gpt-oss: the k largest logits, then a softmax among them alone (ties too go to the lower expert).
TEST(MoeRouting, SoftmaxOfTheTopKLogits) {
  std::vector<float> logits{0.5f, 2.0f, 1.0f, 2.0f, -3.0f};
  int32_t experts[3];
  float weights[3];
  route_token(ExpertGating::TopKSoftmax, logits.data(), 5, 3, experts, weights);
  EXPECT_EQ(experts[0], 1);
  EXPECT_EQ(experts[1], 3);
  EXPECT_EQ(experts[2], 2);
  const double sum = 2 * std::exp(2.0) + std::exp(1.0);
  EXPECT_NEAR(weights[0], std::exp(2.0) / sum, 1e-6);
  EXPECT_NEAR(weights[1], std::exp(2.0) / sum, 1e-6);
  EXPECT_NEAR(weights[2], std::exp(1.0) / sum, 1e-6);
}

TEST(MoeRouting, TiesGoToTheLowerExpert) {
  std::vector<float> logits{1.0f, 3.0f, 1.0f, 3.0f, 1.0f};
  int32_t experts[3];
  float weights[3];
  route_token(ExpertGating::SoftmaxTopK, logits.data(), 5, 3, experts, weights);
  EXPECT_EQ(experts[0], 1);
  EXPECT_EQ(experts[1], 3);
  EXPECT_EQ(experts[2], 0);
  EXPECT_FLOAT_EQ(weights[0], weights[1]);
}

// A layer of `experts` random experts stored as `type`, and its router in F32.
class MoeLayer {
 public:
  MoeLayer(const ModelSpec& spec, TensorType type, uint64_t seed) : spec_(spec) {
    const MoeSpec& moe = spec.layers[0].moe;
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f / std::sqrt(float(spec.dim)));
    const auto draw = [&](LayerRole role, TensorType t, int64_t rows, int64_t cols, float scale) {
      std::vector<float> values(size_t(rows * cols));
      for (float& v : values) v = scale * normal(rng);
      auto& bytes = storage_.emplace_back(size_t(rows) * row_bytes(t, cols));
      for (int64_t r = 0; r < rows; ++r) quantize_row(t, &values[size_t(r * cols)], bytes.data() + r * row_bytes(t, cols), cols);
      auto& info = infos_.emplace_back();
      info.name = std::string(role_info(role).gguf_part);
      WeightRef& w = weights_[role];
      w = {&info, bytes.data(), t, rows, cols};
      // The engine's view of a file: what the weights decode to.
      auto& decoded = decoded_[size_t(role)];
      decoded.resize(values.size());
      for (int64_t r = 0; r < rows; ++r) {
        dequantize_row(t, bytes.data() + r * row_bytes(t, cols), &decoded[size_t(r * cols)], cols);
      }
    };
    infos_.reserve(4);
    storage_.reserve(4);
    draw(LayerRole::FfnRouter, TensorType::F32, moe.n_experts, spec.dim, 4.0f);
    draw(LayerRole::FfnGateExperts, type, moe.n_experts * moe.expert_ffn_dim, spec.dim, 1.0f);
    draw(LayerRole::FfnUpExperts, type, moe.n_experts * moe.expert_ffn_dim, spec.dim, 1.0f);
    draw(LayerRole::FfnDownExperts, type, moe.n_experts * spec.dim, moe.expert_ffn_dim, 1.0f);
    for (LayerRole r : {LayerRole::FfnGateExperts, LayerRole::FfnUpExperts, LayerRole::FfnDownExperts}) {
      weights_[r].experts = moe.n_experts;
    }
  }

  const LayerWeights& weights() const { return weights_; }

  // The block on one row, in float64 from the decoded weights.
  std::vector<double> expected(const float* x) const {
    const MoeSpec& moe = spec_.layers[0].moe;
    const int64_t dim = spec_.dim, width = moe.expert_ffn_dim;
    const auto row_dot = [&](LayerRole role, int64_t row, const auto* in, int64_t n) {
      double sum = 0.0;
      for (int64_t i = 0; i < n; ++i) sum += double(decoded_[size_t(role)][size_t(row * n + i)]) * double(in[i]);
      return sum;
    };
    std::vector<double> probs(size_t(moe.n_experts));
    for (int64_t e = 0; e < moe.n_experts; ++e) probs[size_t(e)] = row_dot(LayerRole::FfnRouter, e, x, dim);
    const double top = *std::max_element(probs.begin(), probs.end());
    for (double& p : probs) p = std::exp(p - top);
    std::vector<int64_t> order(probs.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = int64_t(i);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return probs[size_t(a)] > probs[size_t(b)]; });
    double chosen = 0.0;
    for (int64_t j = 0; j < moe.n_experts_used; ++j) chosen += probs[size_t(order[size_t(j)])];
    std::vector<double> out(static_cast<size_t>(dim));
    for (int64_t j = 0; j < moe.n_experts_used; ++j) {
      const int64_t e = order[size_t(j)];
      std::vector<double> hidden(static_cast<size_t>(width));
      for (int64_t h = 0; h < width; ++h) {
        const double g = row_dot(LayerRole::FfnGateExperts, e * width + h, x, dim);
        hidden[size_t(h)] = g / (1.0 + std::exp(-g)) * row_dot(LayerRole::FfnUpExperts, e * width + h, x, dim);
      }
      for (int64_t d = 0; d < dim; ++d) {
        out[size_t(d)] += probs[size_t(e)] / chosen * row_dot(LayerRole::FfnDownExperts, e * dim + d, hidden.data(), width);
      }
    }
    return out;
  }

 private:
  ModelSpec spec_;
  std::vector<GgufTensorInfo> infos_;
  std::vector<std::vector<uint8_t>> storage_;
  std::array<std::vector<float>, kLayerRoleCount> decoded_;
  LayerWeights weights_;
};

ModelSpec moe_spec() {
  ModelSpec spec;
  spec.dim = 64;
  spec.n_layers = 1;
  spec.layers.resize(1);
  spec.layers[0].moe = {6, 2, 96};
  return spec;
}

std::vector<float> random_rows(int64_t n, int64_t dim, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(size_t(n * dim));
  for (float& v : x) v = normal(rng);
  return x;
}

TEST(MoeFfn, MatchesFloat64OverEachTokensExperts) {
  const ModelSpec spec = moe_spec();
  const MoeLayer layer(spec, TensorType::F32, 1);
  const int64_t n = 5;
  const auto x = random_rows(n, spec.dim, 2);
  std::vector<float> y(x.size());
  ThreadPool pool(2);
  MoeFfn moe(spec, n);
  const TokenGroup all{0, n, n};
  moe.run(spec.layers[0], layer.weights(), x.data(), y.data(), n, {&all, 1}, pool);
  for (int64_t t = 0; t < n; ++t) {
    const auto expected = layer.expected(&x[size_t(t * spec.dim)]);
    double err = 0.0, norm = 0.0;
    for (int64_t d = 0; d < spec.dim; ++d) {
      err += std::pow(double(y[size_t(t * spec.dim + d)]) - expected[size_t(d)], 2);
      norm += expected[size_t(d)] * expected[size_t(d)];
    }
    EXPECT_LT(std::sqrt(err / norm), 1e-5) << "token " << t;
  }
}

// Three sequences in one pass (one decoding, two with prompts of 3 and 6
// tokens) get the numbers each gets in a pass of its own, bit for bit, though
// an expert then takes tokens of several sequences at once.
TEST(MoeFfn, BatchedSequencesGetTheirNumbersAlone) {
  const ModelSpec spec = moe_spec();
  const MoeLayer layer(spec, TensorType::Q8_0, 3);
  const std::vector<TokenGroup> groups{{0, 1, 1}, {1, 3, 3}, {4, 6, 6}};
  const int64_t n = 10;
  const auto x = random_rows(n, spec.dim, 4);
  ThreadPool pool(2);
  MoeFfn moe(spec, n);
  std::vector<float> together(x.size());
  moe.run(spec.layers[0], layer.weights(), x.data(), together.data(), n, groups, pool);
  for (const TokenGroup& g : groups) {
    std::vector<float> alone(size_t(g.count * spec.dim));
    const TokenGroup own{0, g.count, g.alone};
    moe.run(spec.layers[0], layer.weights(), &x[size_t(g.first * spec.dim)], alone.data(), g.count, {&own, 1}, pool);
    EXPECT_EQ(std::memcmp(alone.data(), &together[size_t(g.first * spec.dim)], alone.size() * sizeof(float)), 0)
        << "the group from row " << g.first;
  }
}

}  // namespace
}  // namespace nt::cpu

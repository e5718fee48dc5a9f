#include "backend/cpu/moe_ffn.h"

#include <algorithm>
#include <cmath>

#include "backend/cpu/ops.h"

namespace nt::cpu {
namespace {

using enum LayerRole;

WeightView view_of(const WeightRef& w) { return {w.data, w.type, w.rows, w.cols, w.row_stride(), w.info->name}; }

LayerRole expert_bias_role(LayerRole matrix) {
  switch (matrix) {
    case FfnGateExperts: return FfnGateExpertsBias;
    case FfnUpExperts: return FfnUpExpertsBias;
    default: return FfnDownExpertsBias;
  }
}

}  // namespace

void route_token(ExpertGating gating, float* logits, int64_t n_experts, int64_t k, int32_t* experts, float* weights) {
  if (gating == ExpertGating::SoftmaxTopK) softmax(logits, n_experts);
  for (int64_t j = 0; j < k; ++j) {
    // The first of the largest: the lower index wins a tie; a chosen one is marked taken.
    const int64_t best = std::max_element(logits, logits + n_experts) - logits;
    experts[j] = int32_t(best);
    weights[j] = logits[best];
    logits[best] = -INFINITY;
  }
  if (gating == ExpertGating::TopKSoftmax) return softmax(weights, k);
  float sum = 0.0f;
  for (int64_t j = 0; j < k; ++j) sum += weights[j];
  for (int64_t j = 0; j < k; ++j) weights[j] /= sum;
}

MoeFfn::MoeFfn(const ModelSpec& spec, int64_t max_rows) : dim_(spec.dim) {
  const MoeSpec widest = spec.widest_experts();
  const int64_t experts = widest.n_experts, used = widest.n_experts_used, width = widest.expert_ffn_dim;
  const size_t n = size_t(max_rows);
  logits_.resize(n * size_t(experts));
  chosen_.resize(n * size_t(used));
  chosen_weights_.resize(n * size_t(used));
  row_group_.resize(n);
  expert_start_.resize(size_t(experts) + 1);
  by_expert_.resize(n * size_t(used));
  xe_.resize(n * size_t(dim_));
  ye_.resize(n * size_t(dim_));
  gate_.resize(n * size_t(width));
  up_.resize(n * size_t(width));
}

void MoeFfn::run(const LayerSpec& layer, const LayerWeights& w, const float* x, float* y, int64_t n,
                 std::span<const TokenGroup> groups, ThreadPool& pool) {
  route(layer.moe, w, x, n, groups, pool);
  std::fill(y, y + n * dim_, 0.0f);
  for (int64_t e = 0; e < layer.moe.n_experts; ++e) {
    const std::span<const Routed> tokens(by_expert_.data() + expert_start_[size_t(e)],
                                         size_t(expert_start_[size_t(e) + 1] - expert_start_[size_t(e)]));
    if (!tokens.empty()) run_expert(layer, w, e, tokens, x, y, pool);
  }
}

// Every row's experts and weights, then the rows sorted by expert (a counting
// sort, so that each expert sees its rows in ascending order).
void MoeFfn::route(const MoeSpec& moe, const LayerWeights& w, const float* x, int64_t n, std::span<const TokenGroup> groups,
                   ThreadPool& pool) {
  const int64_t experts = moe.n_experts, k = moe.n_experts_used;
  matmul_groups(view_of(w[FfnRouter]), x, logits_.data(), groups, pool);
  if (moe.biases) add_bias_rows(logits_.data(), w[FfnRouterBias].f32(), n, experts);
  for (int64_t t = 0; t < n; ++t) {
    route_token(moe.gating, &logits_[size_t(t * experts)], experts, k, &chosen_[size_t(t * k)], &chosen_weights_[size_t(t * k)]);
  }
  groups_.assign(groups.begin(), groups.end());
  for (size_t g = 0; g < groups.size(); ++g) {
    std::fill_n(row_group_.begin() + groups[g].first, groups[g].count, int64_t(g));
  }
  std::fill(expert_start_.begin(), expert_start_.begin() + experts + 1, 0);
  for (int64_t i = 0; i < n * k; ++i) ++expert_start_[size_t(chosen_[size_t(i)]) + 1];
  for (int64_t e = 0; e < experts; ++e) expert_start_[size_t(e) + 1] += expert_start_[size_t(e)];
  std::vector<int64_t>& next = expert_fill_;
  next.assign(expert_start_.begin(), expert_start_.begin() + experts);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const size_t i = size_t(t * k + j);
      by_expert_[size_t(next[size_t(chosen_[i])]++)] = {t, chosen_weights_[i]};
    }
  }
}

void MoeFfn::expert_matmul(const MoeSpec& moe, const LayerWeights& w, LayerRole role, int64_t expert, const float* in,
                           float* out, int64_t m, ThreadPool& pool) {
  const WeightRef matrix = w[role].expert(expert);
  matmul_groups(view_of(matrix), in, out, expert_groups_, pool);
  if (moe.biases) add_bias_rows(out, w[expert_bias_role(role)].expert(expert).f32(), m, matrix.rows);
}

// y[row] += weight * down(act(gate(x[row])) * up(x[row])) for every row routed to `expert`.
void MoeFfn::run_expert(const LayerSpec& layer, const LayerWeights& w, int64_t expert, std::span<const Routed> tokens,
                        const float* x, float* y, ThreadPool& pool) {
  const int64_t m = int64_t(tokens.size());
  // The expert's rows keep their groups' kernels: a group's rows are adjacent here too.
  expert_groups_.clear();
  for (int64_t i = 0; i < m; ++i) {
    const int64_t g = row_group_[size_t(tokens[size_t(i)].row)];
    if (i == 0 || g != row_group_[size_t(tokens[size_t(i) - 1].row)]) expert_groups_.push_back({i, 0, groups_[size_t(g)].alone});
    ++expert_groups_.back().count;
  }
  compute_expert(layer, w, expert, tokens, x, y, pool);
}

void MoeFfn::add_expert(const LayerSpec& layer, const LayerWeights& w, int64_t expert, std::span<const Routed> tokens,
                        const float* x, float* y, ThreadPool& pool) {
  const int64_t m = int64_t(tokens.size());
  expert_groups_.assign(1, {0, m, m});
  compute_expert(layer, w, expert, tokens, x, y, pool);
}

void MoeFfn::compute_expert(const LayerSpec& layer, const LayerWeights& w, int64_t expert, std::span<const Routed> tokens,
                            const float* x, float* y, ThreadPool& pool) {
  const int64_t m = int64_t(tokens.size()), width = layer.moe.expert_ffn_dim;
  for (int64_t i = 0; i < m; ++i) {
    const float* row = x + tokens[size_t(i)].row * dim_;
    std::copy(row, row + dim_, xe_.begin() + i * dim_);
  }
  expert_matmul(layer.moe, w, FfnGateExperts, expert, xe_.data(), gate_.data(), m, pool);
  expert_matmul(layer.moe, w, FfnUpExperts, expert, xe_.data(), up_.data(), m, pool);
  for (int64_t i = 0; i < m; ++i) {
    float* gate = gate_.data() + i * width;
    gated_activation(layer.activation, gate, up_.data() + i * width, gate, width);
  }
  expert_matmul(layer.moe, w, FfnDownExperts, expert, gate_.data(), ye_.data(), m, pool);
  for (int64_t i = 0; i < m; ++i) {
    float* out = y + tokens[size_t(i)].row * dim_;
    const float* part = ye_.data() + i * dim_;
    const float weight = tokens[size_t(i)].weight;
    for (int64_t d = 0; d < dim_; ++d) out[d] += weight * part[d];
  }
}

}  // namespace nt::cpu

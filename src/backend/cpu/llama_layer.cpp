#include "backend/cpu/llama_layer.h"

#include <cmath>

#include "backend/cpu/kernels.h"
#include "backend/cpu/ops.h"

namespace nt::cpu {
namespace {

WeightView view_of(const WeightRef& w) { return {w.data, w.type, w.rows, w.cols, w.row_stride(), w.info->name}; }

// Position of row t of a run.
int64_t row_pos(const SequenceRun& run, int64_t t) { return run.pos + (t - run.first); }

}  // namespace

LlamaLayer::LlamaLayer(const LlamaConfig& config, std::vector<float> inv_freqs, int64_t max_rows)
    : config_(config), inv_freqs_(std::move(inv_freqs)) {
  const auto& c = config_;
  // Dimensions past rope_dim are not rotated: a zero frequency is the identity.
  inv_freqs_.resize(size_t(c.head_dim / 2), 0.0f);
  const size_t n = size_t(max_rows);
  xb_.resize(n * c.dim);
  q_.resize(n * c.q_dim());
  k_.resize(n * c.kv_dim());
  v_.resize(n * c.kv_dim());
  att_.resize(n * c.q_dim());
  gate_.resize(n * c.ffn_dim);
  up_.resize(n * c.ffn_dim);
}

void LlamaLayer::run(const LlamaLayerWeights& w, const LayerCache& k, const LayerCache& v, const LayerRows& rows, float* x,
                     ThreadPool& pool) {
  const auto& c = config_;
  const int64_t n = rows.n;
  const auto matmul = [&](const WeightRef& m, const float* in, float* out) {
    matmul_groups(view_of(m), in, out, rows.groups, pool);
  };

  // Attention block: x += Wo · attention(rope(Wq·norm(x)), rope(Wk·norm(x)), Wv·norm(x))
  rmsnorm_rows(x, w.attn_norm.f32(), xb_.data(), n);
  matmul(w.wq, xb_.data(), q_.data());
  matmul(w.wk, xb_.data(), k_.data());
  matmul(w.wv, xb_.data(), v_.data());
  for (const SequenceRun& run : rows.runs) {
    for (int64_t t = run.first; t < run.first + run.count; ++t) {
      // A tree row is cached at row_pos but rotated for its depth.
      const int64_t pos = rows.tree ? rows.tree->rope_pos[size_t(t)] : row_pos(run, t);
      cpu::rope(&q_[size_t(t * c.q_dim())], int(c.n_heads), int(c.head_dim), pos, inv_freqs_.data());
      cpu::rope(&k_[size_t(t * c.kv_dim())], int(c.n_kv_heads), int(c.head_dim), pos, inv_freqs_.data());
    }
  }
  store_kv(k, v, rows);
  attend(k, v, rows, pool);
  matmul(w.wo, att_.data(), xb_.data());
  add_inplace(x, xb_.data(), n * c.dim);

  // Feed-forward block: x += W_down · (silu(W_gate·norm(x)) * W_up·norm(x))
  rmsnorm_rows(x, w.ffn_norm.f32(), xb_.data(), n);
  matmul(w.w_gate, xb_.data(), gate_.data());
  matmul(w.w_up, xb_.data(), up_.data());
  // Row by row: the kernel's vector blocks and scalar tail then split each
  // row as in a one-token step, whatever the pass holds (an ffn_dim that is
  // no multiple of the vector width would otherwise round by batch size).
  for (int64_t t = 0; t < n; ++t) {
    const size_t row = size_t(t * c.ffn_dim);
    swiglu(gate_.data() + row, up_.data() + row, gate_.data() + row, c.ffn_dim);
  }
  matmul(w.w_down, gate_.data(), xb_.data());
  add_inplace(x, xb_.data(), n * c.dim);
}

KvView LlamaLayer::view(const LayerCache& cache) const {
  return {cache.data, cache.type, config_.kv_dim(), config_.head_dim};
}

void LlamaLayer::rmsnorm_rows(const float* x, const float* weight, float* y, int64_t n) const {
  const int64_t dim = config_.dim;
  for (int64_t t = 0; t < n; ++t) cpu::rmsnorm(x + t * dim, weight, y + t * dim, dim, config_.rms_eps);
}

void LlamaLayer::store_kv(const LayerCache& k, const LayerCache& v, const LayerRows& rows) {
  const int64_t kv_dim = config_.kv_dim();
  for (auto [src, cache] : {std::pair{&k_, &k}, std::pair{&v_, &v}}) {
    for (const SequenceRun& run : rows.runs) {
      for (int64_t t = run.first; t < run.first + run.count; ++t) {
        const int64_t row = rows.pages->slot(run.seq, row_pos(run, t));
        const float* from = src->data() + size_t(t * kv_dim);
        if (cache->type == TensorType::F16) {
          uint16_t* to = static_cast<uint16_t*>(cache->data) + row * kv_dim;
          kernels().f32_to_f16(from, to, kv_dim);
        } else {
          std::copy(from, from + kv_dim, static_cast<float*>(cache->data) + row * kv_dim);
        }
      }
    }
  }
}

void LlamaLayer::attend(const LayerCache& k, const LayerCache& v, const LayerRows& rows, ThreadPool& pool) {
  const auto& c = config_;
  const AttentionShape shape{int(c.n_heads), int(c.n_kv_heads), int(c.head_dim), 1.0f / std::sqrt(float(c.head_dim))};
  attention_runs_.clear();
  for (const SequenceRun& run : rows.runs) {
    const size_t row = size_t(run.first) * size_t(c.q_dim());
    AttentionRun a{&q_[row], &att_[row], run.pos, int(run.count), rows.pages->pages(run.seq).data(), rows.pages->page_size()};
    if (run.tree) {
      a.tree_start = rows.tree->tree_start[size_t(run.first)];
      a.path_start = rows.tree->path_start.data() + run.first;
      a.paths = rows.tree->paths.data();
    }
    attention_runs_.push_back(a);
  }
  attention_runs(attention_runs_, view(k), view(v), shape, pool);
}

}  // namespace nt::cpu

#include "backend/cpu/decoder_layer.h"

#include <algorithm>

#include "backend/cpu/kernels.h"
#include "backend/cpu/ops.h"
#include "model/rope.h"

namespace nt::cpu {
namespace {

using enum LayerRole;

WeightView view_of(const WeightRef& w) { return {w.data, w.type, w.rows, w.cols, w.row_stride(), w.info->name}; }

// Position of row t of a run.
int64_t row_pos(const SequenceRun& run, int64_t t) { return run.pos + (t - run.first); }

// rows[t] += bias for every row.
void add_bias(float* rows, const WeightRef& bias, int64_t n) { add_bias_rows(rows, bias.f32(), n, bias.cols); }

}  // namespace

DecoderLayer::DecoderLayer(const ModelSpec& spec, const float* rope_freq_factors, int64_t max_rows) : spec_(spec) {
  const auto& c = spec_;
  // Llama 3.1's factors belong to the model's table; a layer with a table of
  // its own (Gemma 3's local layers) takes none.
  for (const LayerSpec& layer : c.layers) {
    const RopeSpec& rope = layer.attention.rope;
    inv_freqs_.push_back(rope_inv_freqs(rope, c.rope_dim, rope == c.rope() ? rope_freq_factors : nullptr));
    rope_magnitudes_.push_back(rope_magnitude(rope));
  }
  const size_t n = size_t(max_rows);
  xb_.resize(n * c.dim);
  q_.resize(n * c.q_dim());
  k_.resize(n * c.kv_dim());
  v_.resize(n * c.kv_dim());
  att_.resize(n * c.q_dim());
  const bool dense = std::any_of(c.layers.begin(), c.layers.end(), [](const LayerSpec& l) { return !l.has_experts(); });
  if (dense) {
    gate_.resize(n * c.ffn_dim);
    up_.resize(n * c.ffn_dim);
  }
  if (c.has_experts()) {
    ffn_out_.resize(n * c.dim);
    moe_.emplace(c, max_rows);
  }
}

void DecoderLayer::run(int64_t layer, const LayerWeights& w, const LayerCache& k, const LayerCache& v, const LayerRows& rows,
                       float* x, ThreadPool& pool) {
  attention_block(layer, w, k, v, rows, x, pool);
  ffn_block(spec_.layers[size_t(layer)], w, rows, x, pool);
}

// x += [post-norm] (Wo · attention(rope([norm] Wq·norm(x) [+ bq]), rope([norm] Wk·norm(x) [+ bk]), Wv·norm(x) [+ bv]) [+ bo])
void DecoderLayer::attention_block(int64_t layer, const LayerWeights& w, const LayerCache& k, const LayerCache& v,
                                   const LayerRows& rows, float* x, ThreadPool& pool) {
  const auto& c = spec_;
  const LayerSpec& spec = c.layers[size_t(layer)];
  const int64_t n = rows.n;
  const auto matmul = [&](const WeightRef& m, const float* in, float* out) {
    matmul_groups(view_of(m), in, out, rows.groups, pool);
  };
  rmsnorm_rows(x, w[AttnNorm], xb_.data(), n, c.dim);
  matmul(w[AttnQ], xb_.data(), q_.data());
  matmul(w[AttnK], xb_.data(), k_.data());
  matmul(w[AttnV], xb_.data(), v_.data());
  if (spec.attention.qkv_bias) {
    add_bias(q_.data(), w[AttnQBias], n);
    add_bias(k_.data(), w[AttnKBias], n);
    add_bias(v_.data(), w[AttnVBias], n);
  }
  if (spec.attention.qk_norm) {  // each head normed on its own
    rmsnorm_rows(q_.data(), w[AttnQNorm], q_.data(), n * c.n_heads, c.head_dim);
    rmsnorm_rows(k_.data(), w[AttnKNorm], k_.data(), n * c.n_kv_heads, c.head_dim);
  }
  rope_rows(layer, rows);
  store_kv(k, v, rows);
  attend(spec, w, k, v, rows, pool);
  matmul(w[AttnOutput], att_.data(), xb_.data());
  if (spec.attention.output_bias) add_bias(xb_.data(), w[AttnOutputBias], n);
  if (spec.post_attention_norm) rmsnorm_rows(xb_.data(), w[PostAttnNorm], xb_.data(), n, c.dim);
  add_inplace(x, xb_.data(), n * c.dim);
}

// x += [post-norm] ffn(norm(x)): the dense FFN or the layer's mixture of experts (moe_ffn.h).
void DecoderLayer::ffn_block(const LayerSpec& spec, const LayerWeights& w, const LayerRows& rows, float* x, ThreadPool& pool) {
  const auto& c = spec_;
  const int64_t n = rows.n;
  rmsnorm_rows(x, w[ffn_norm_role(spec)], xb_.data(), n, c.dim);
  float* out = xb_.data();
  if (spec.has_experts()) {
    out = ffn_out_.data();
    moe_->run(spec, w, xb_.data(), out, n, rows.groups, pool);
  } else {
    dense_ffn(spec, w, rows, pool);
  }
  if (spec.post_ffn_norm) rmsnorm_rows(out, w[PostFfnNorm], out, n, c.dim);
  add_inplace(x, out, n * c.dim);
}

// xb_ = W_down · (act(W_gate·xb_) * W_up·xb_)
void DecoderLayer::dense_ffn(const LayerSpec& spec, const LayerWeights& w, const LayerRows& rows, ThreadPool& pool) {
  const auto& c = spec_;
  const auto matmul = [&](const WeightRef& m, const float* in, float* out) {
    matmul_groups(view_of(m), in, out, rows.groups, pool);
  };
  matmul(w[FfnGate], xb_.data(), gate_.data());
  matmul(w[FfnUp], xb_.data(), up_.data());
  // Row by row: the kernel's vector blocks and scalar tail then split each
  // row as in a one-token step, whatever the pass holds (an ffn_dim that is
  // no multiple of the vector width would otherwise round by batch size).
  for (int64_t t = 0; t < rows.n; ++t) {
    float* gate = gate_.data() + size_t(t * c.ffn_dim);
    gated_activation(spec.activation, gate, up_.data() + size_t(t * c.ffn_dim), gate, c.ffn_dim);
  }
  matmul(w[FfnDown], gate_.data(), xb_.data());
}

KvView DecoderLayer::view(const LayerCache& cache) const {
  return {cache.data, cache.type, spec_.kv_dim(), spec_.head_dim};
}

// n rows of `width` values, each normed by the same weight.
void DecoderLayer::rmsnorm_rows(const float* x, const WeightRef& weight, float* y, int64_t n, int64_t width) const {
  for (int64_t t = 0; t < n; ++t) cpu::rmsnorm(x + t * width, weight.f32(), y + t * width, width, spec_.rms_eps);
}

void DecoderLayer::rope_rows(int64_t layer, const LayerRows& rows) {
  const auto& c = spec_;
  const float* inv_freqs = inv_freqs_[size_t(layer)].data();
  const RopeHeads heads{int(c.head_dim), int(c.rope_dim), c.rope_style, rope_magnitudes_[size_t(layer)]};
  for (const SequenceRun& run : rows.runs) {
    for (int64_t t = run.first; t < run.first + run.count; ++t) {
      // A tree row is cached at row_pos but rotated for its depth.
      const int64_t pos = rows.tree ? rows.tree->rope_pos[size_t(t)] : row_pos(run, t);
      cpu::rope(&q_[size_t(t * c.q_dim())], int(c.n_heads), heads, pos, inv_freqs);
      cpu::rope(&k_[size_t(t * c.kv_dim())], int(c.n_kv_heads), heads, pos, inv_freqs);
    }
  }
}

void DecoderLayer::store_kv(const LayerCache& k, const LayerCache& v, const LayerRows& rows) {
  const int64_t kv_dim = spec_.kv_dim();
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

void DecoderLayer::attend(const LayerSpec& spec, const LayerWeights& w, const LayerCache& k, const LayerCache& v,
                          const LayerRows& rows, ThreadPool& pool) {
  const auto& c = spec_;
  const AttentionShape shape{int(c.n_heads), int(c.n_kv_heads), int(c.head_dim), c.attention_scale, spec.attention.window,
                             spec.attention.sinks ? w[AttnSinks].f32() : nullptr};
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

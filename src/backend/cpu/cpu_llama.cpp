#include "backend/cpu/cpu_llama.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/attention.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/thread_pool.h"
#include "core/error.h"
#include "core/half.h"
#include "model/llama_weights.h"
#include "model/rope.h"

namespace nt {
namespace {

cpu::WeightView view(const WeightRef& w) { return {w.data, w.type, w.rows, w.cols, w.row_stride(), w.info->name}; }

class CpuLlamaRunner final : public ModelRunner {
 public:
  CpuLlamaRunner(std::shared_ptr<const GgufFile> file, const CpuRunnerOptions& opt)
      : file_(std::move(file)),
        config_(read_llama_config(file_->header(), file_->path())),
        weights_(load_llama_weights(*file_, config_)),
        pool_(opt.threads),
        context_(opt.context > 0 ? opt.context : std::min<int64_t>(config_.context_length, 4096)),
        max_batch_(std::max<int64_t>(1, opt.max_batch)),
        kv_type_(opt.kv_f32 ? TensorType::F32 : TensorType::F16) {
    const auto& c = config_;
    inv_freqs_ = rope_inv_freqs(c, weights_.rope_freqs.info ? weights_.rope_freqs.f32() : nullptr);
    // Dimensions past rope_dim are not rotated: a zero frequency is the identity.
    inv_freqs_.resize(size_t(c.head_dim / 2), 0.0f);
    const size_t kv_elems = size_t(c.n_layers) * size_t(context_) * size_t(c.kv_dim());
    const size_t elem_bytes = kv_type_ == TensorType::F16 ? 2 : 4;
    k_cache_.resize(kv_elems * elem_bytes);
    v_cache_.resize(kv_elems * elem_bytes);
    const size_t n = size_t(max_batch_);
    x_.resize(n * c.dim);
    xb_.resize(n * c.dim);
    q_.resize(n * c.q_dim());
    k_.resize(n * c.kv_dim());
    v_.resize(n * c.kv_dim());
    att_.resize(n * c.q_dim());
    gate_.resize(n * c.ffn_dim);
    up_.resize(n * c.ffn_dim);
  }

  const LlamaConfig& config() const override { return config_; }
  int64_t context_size() const override { return context_; }

  std::string description() const override {
    return fmt::format("cpu ({} threads, {}, {} KV cache, context {})", pool_.size(), cpu::isa_name(cpu::kernels().isa),
                       tensor_type_name(kv_type_), context_);
  }

  uint64_t weight_bytes_per_token() const override {
    uint64_t bytes = weights_.output.bytes() + weights_.output_norm.bytes();
    for (const auto& l : weights_.layers) bytes += l.bytes();
    return bytes;
  }

  uint64_t kv_bytes_per_position() const override { return (k_cache_.size() + v_cache_.size()) / uint64_t(context_); }

  void forward(std::span<const int32_t> tokens, int64_t pos, float* logits, bool all_logits) override {
    if (pos < 0 || pos + int64_t(tokens.size()) > context_) {
      fail("context overflow: {} tokens at position {} exceed the context of {} tokens (raise -c, up to the model's {})",
           tokens.size(), pos, context_, config_.context_length);
    }
    for (const auto t : tokens) {
      if (t < 0 || t >= config_.vocab_size) fail("token id {} is outside the vocabulary (size {})", t, config_.vocab_size);
    }
    for (size_t at = 0; at < tokens.size(); at += size_t(max_batch_)) {
      const size_t n = std::min(tokens.size() - at, size_t(max_batch_));
      const bool last_chunk = at + n == tokens.size();
      float* out = all_logits ? logits + at * size_t(config_.vocab_size) : (last_chunk ? logits : nullptr);
      forward_batch(tokens.subspan(at, n), pos + int64_t(at), out, all_logits);
    }
  }

 private:
  // One pass of n <= max_batch tokens: every weight matrix is read once for all of them.
  void forward_batch(std::span<const int32_t> tokens, int64_t pos, float* logits, bool all_logits) {
    const auto& c = config_;
    const int64_t n = int64_t(tokens.size());

    // Embedding lookup, decoded from the table's format.
    for (int64_t t = 0; t < n; ++t) cpu::embedding_row(view(weights_.token_embd), tokens[size_t(t)], &x_[size_t(t * c.dim)]);

    for (int64_t l = 0; l < c.n_layers; ++l) {
      const auto& w = weights_.layers[size_t(l)];
      // Attention block: x += Wo · attention(rope(Wq·norm(x)), rope(Wk·norm(x)), Wv·norm(x))
      rmsnorm_rows(x_.data(), w.attn_norm.f32(), xb_.data(), n);
      cpu::matmul(view(w.wq), xb_.data(), q_.data(), int(n), pool_);
      cpu::matmul(view(w.wk), xb_.data(), k_.data(), int(n), pool_);
      cpu::matmul(view(w.wv), xb_.data(), v_.data(), int(n), pool_);
      for (int64_t t = 0; t < n; ++t) {
        cpu::rope(&q_[size_t(t * c.q_dim())], int(c.n_heads), int(c.head_dim), pos + t, inv_freqs_.data());
        cpu::rope(&k_[size_t(t * c.kv_dim())], int(c.n_kv_heads), int(c.head_dim), pos + t, inv_freqs_.data());
      }
      store_kv(l, pos, n);
      attend(l, pos, n);
      cpu::matmul(view(w.wo), att_.data(), xb_.data(), int(n), pool_);
      cpu::add_inplace(x_.data(), xb_.data(), n * c.dim);

      // Feed-forward block: x += W_down · (silu(W_gate·norm(x)) * W_up·norm(x))
      rmsnorm_rows(x_.data(), w.ffn_norm.f32(), xb_.data(), n);
      cpu::matmul(view(w.w_gate), xb_.data(), gate_.data(), int(n), pool_);
      cpu::matmul(view(w.w_up), xb_.data(), up_.data(), int(n), pool_);
      cpu::swiglu(gate_.data(), up_.data(), gate_.data(), n * c.ffn_dim);
      cpu::matmul(view(w.w_down), gate_.data(), xb_.data(), int(n), pool_);
      cpu::add_inplace(x_.data(), xb_.data(), n * c.dim);
    }
    if (!logits) return;

    // Final norm and output head, for every token or only the last.
    const int64_t first = all_logits ? 0 : n - 1;
    const int64_t rows = n - first;
    rmsnorm_rows(&x_[size_t(first * c.dim)], weights_.output_norm.f32(), xb_.data(), rows);
    cpu::matmul(view(weights_.output), xb_.data(), logits, int(rows), pool_);
  }

  void rmsnorm_rows(const float* x, const float* weight, float* y, int64_t n) const {
    const int64_t dim = config_.dim;
    for (int64_t t = 0; t < n; ++t) cpu::rmsnorm(x + t * dim, weight, y + t * dim, dim, config_.rms_eps);
  }

  // Layer l's cache holds [context][kv_dim] in kv_type_.
  cpu::KvView cache_view(const std::vector<uint8_t>& cache, int64_t layer) const {
    const size_t elem = kv_type_ == TensorType::F16 ? 2 : 4;
    const size_t layer_bytes = size_t(context_) * size_t(config_.kv_dim()) * elem;
    return {cache.data() + size_t(layer) * layer_bytes, kv_type_, config_.kv_dim(), config_.head_dim};
  }

  void store_kv(int64_t layer, int64_t pos, int64_t n) {
    const int64_t kv_dim = config_.kv_dim();
    for (auto [src, cache] : {std::pair{&k_, &k_cache_}, std::pair{&v_, &v_cache_}}) {
      auto* base = const_cast<void*>(cache_view(*cache, layer).data);
      for (int64_t i = 0; i < n * kv_dim; ++i) {
        const size_t at = size_t(pos * kv_dim + i);
        if (kv_type_ == TensorType::F16) {
          static_cast<uint16_t*>(base)[at] = fp32_to_fp16((*src)[size_t(i)]);
        } else {
          static_cast<float*>(base)[at] = (*src)[size_t(i)];
        }
      }
    }
  }

  void attend(int64_t layer, int64_t pos, int64_t n) {
    const auto& c = config_;
    const cpu::AttentionShape shape{int(c.n_heads), int(c.n_kv_heads), int(c.head_dim),
                                    1.0f / std::sqrt(float(c.head_dim))};
    const auto k = cache_view(k_cache_, layer), v = cache_view(v_cache_, layer);
    if (n == 1) {
      cpu::attention(q_.data(), k, v, pos + 1, shape, att_.data(), pool_);
    } else {
      cpu::attention_prefill(q_.data(), k, v, pos, int(n), shape, att_.data(), pool_);
    }
  }

  std::shared_ptr<const GgufFile> file_;
  LlamaConfig config_;
  LlamaWeights weights_;
  mutable cpu::ThreadPool pool_;
  int64_t context_;
  int64_t max_batch_;
  TensorType kv_type_;
  std::vector<uint8_t> k_cache_, v_cache_;  // [layer][context][kv_dim] in kv_type_
  std::vector<float> inv_freqs_;            // per rotated pair, scaling folded in
  // Activations for up to max_batch tokens, named as in the model.
  std::vector<float> x_;          // residual stream [n][dim]
  std::vector<float> xb_;         // normed input / projection output [n][dim]
  std::vector<float> q_, k_, v_;  // [n][q_dim], [n][kv_dim], [n][kv_dim]
  std::vector<float> att_;        // attention output [n][q_dim]
  std::vector<float> gate_, up_;  // FFN hidden [n][ffn_dim]
};

}  // namespace

std::unique_ptr<ModelRunner> make_cpu_runner(std::shared_ptr<const GgufFile> file, const CpuRunnerOptions& options) {
  return std::make_unique<CpuLlamaRunner>(std::move(file), options);
}

}  // namespace nt

// The decoder layers of a ModelSpec on the CPU, each over the rows of one pass
// in place, block by block as the layer's spec lists them: the CPU runner
// runs every layer through it, and the CUDA runner the layers its hybrid
// split gives the host (the CPU as a fourth tier).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "backend/cpu/attention.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/moe_ffn.h"
#include "backend/cpu/thread_pool.h"
#include "backend/cpu/tree_rows.h"
#include "model/arch/model_spec.h"
#include "model/model_weights.h"
#include "runtime/batch.h"
#include "runtime/kv_pages.h"

namespace nt::cpu {

// A layer's K or V cache: [pool row][kv_dim] in F16 or F32, a sequence's
// positions mapping to pool rows through its pages.
struct LayerCache {
  void* data = nullptr;
  TensorType type = TensorType::F16;
};

// The rows of one pass: `runs` (first = row index) say which sequence and
// positions each row is, `pages` where they are cached, `groups` which
// matmul kernel each row takes (matmul_groups), and `tree` (when a run is a
// token tree) each row's RoPE position and what it attends to.
struct LayerRows {
  int64_t n = 0;
  std::span<const SequenceRun> runs;
  const KvPages* pages = nullptr;
  std::span<const TokenGroup> groups;
  const TreeRows* tree = nullptr;
};

class DecoderLayer {
 public:
  // Scratch for passes of up to max_rows rows. `rope_freq_factors` (Llama
  // 3.1's rope_freqs tensor, or null) divides the model's RoPE frequencies.
  DecoderLayer(const ModelSpec& spec, const float* rope_freq_factors, int64_t max_rows);

  // x [n][dim] += the attention block, then += the feed-forward block, of
  // layer `layer`, storing every row's K and V in the caches before attending.
  void run(int64_t layer, const LayerWeights& w, const LayerCache& k, const LayerCache& v, const LayerRows& rows, float* x,
           ThreadPool& pool);

  KvView view(const LayerCache& cache) const;

  // After run() of a mixture-of-experts layer over n rows: each row's chosen experts, [n][k].
  std::span<const int32_t> chosen_experts(int64_t layer, int64_t n) const {
    return moe_->chosen(n, spec_.layers[size_t(layer)].moe.n_experts_used);
  }

 private:
  void attention_block(int64_t layer, const LayerWeights& w, const LayerCache& k, const LayerCache& v, const LayerRows& rows,
                       float* x, ThreadPool& pool);
  void ffn_block(const LayerSpec& spec, const LayerWeights& w, const LayerRows& rows, float* x, ThreadPool& pool);
  void dense_ffn(const LayerSpec& spec, const LayerWeights& w, const LayerRows& rows, ThreadPool& pool);
  void rmsnorm_rows(const float* x, const WeightRef& weight, float* y, int64_t n, int64_t width) const;
  void rope_rows(int64_t layer, const LayerRows& rows);
  void store_kv(const LayerCache& k, const LayerCache& v, const LayerRows& rows);
  void attend(const LayerSpec& spec, const LayerWeights& w, const LayerCache& k, const LayerCache& v, const LayerRows& rows,
              ThreadPool& pool);

  ModelSpec spec_;
  std::vector<std::vector<float>> inv_freqs_;  // per layer: rope_dim / 2 frequencies, scaling folded in
  std::vector<float> rope_magnitudes_;         // per layer: rope_magnitude of its table
  // Activations for up to max_rows rows, named as in the model.
  std::vector<float> xb_;         // normed input / block output [n][dim]
  std::vector<float> q_, k_, v_;  // [n][q_dim], [n][kv_dim], [n][kv_dim]
  std::vector<float> att_;        // attention output [n][q_dim]
  std::vector<float> gate_, up_;  // dense FFN hidden [n][ffn_dim], when some layer is dense
  std::vector<float> ffn_out_;    // a mixture's output [n][dim], when some layer has experts
  std::optional<MoeFfn> moe_;     // when some layer has experts
  std::vector<AttentionRun> attention_runs_;
};

}  // namespace nt::cpu

// One decoder layer on the GPU over the rows of a chunk, as the CUDA runner's
// layer loop calls it: RMSNorm, Q/K/V, RoPE and the cache store, attention
// over each sequence's pages, wo, the gated FFN, each step one call whose
// kernel (mat-vec columns, the int8 GEMM, cuBLAS, or norms folded into the
// mat-vecs) is chosen here from the chunk's shape. A layer's spec (LayerSpec)
// adds its family's steps around those: Q/K/V biases and per-head norms
// before RoPE (which then pairs dims as the model does, YaRN's magnitude
// folded in), a sliding window and sinks, the output projection's bias, norms
// on the blocks' outputs, GeGLU or the clamped SwiGLU; a Llama layer
// launches none of them. Rows of stepwise runs
// (speculative verification) compute as one-token steps do: their columns go
// through mat-vec launches that compute every column as the one-column launch
// does (matvec_stepwise), with the step's folded norms, and each row attends
// as the decode step at its position would (a token tree's row as the step at
// its path position, reading its ancestors' keys where the tree cached them).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>
#include <span>
#include <vector>

#include "backend/cpu/tree_rows.h"
#include "backend/cuda/kernels/attention.h"
#include "backend/cuda/kernels/gemm.h"
#include "backend/cuda/kernels/llama_ops.h"
#include "backend/cuda/kernels/matvec.h"
#include "backend/cuda/kernels/quantized_gemm.h"
#include "backend/cuda/multi_gpu/residual_reducer.h"
#include "backend/cuda/runner/expert_ffn.h"
#include "backend/cuda/runner/page_table.h"
#include "backend/cuda/runner/pass_buffers.h"
#include "backend/cuda/weights/device_matrix.h"
#include "backend/cuda/weights/device_weights.h"
#include "model/arch/model_spec.h"
#include "runtime/kv_pages.h"
#include "runtime/kv_window.h"

namespace nt {

// One input of the matrix products, in each form a consumer may need.
struct Input {
  const float* f32;
  const int8_t* q8;
  const float2* q8_scales;
  const uint16_t* f16;
  int64_t cols;
  SuperBlockActivations xs = {};  // instead of q8, when every consumer multiplies them (super_blocks_take)
};

// The rows of a chunk that belong to one sequence (its block table row),
// the device-side position of its first row, and the most keys it sees.
struct ChunkSequence {
  int64_t first_row = 0, rows = 0;
  const int32_t* pos = nullptr;
  int64_t max_keys = 0;
  SeqId seq = 0;
  int64_t first_pos = 0;
  bool stepwise = false;    // a stepwise run's rows (BatchEntry::stepwise)
  int64_t tree_start = -1;  // a token tree's first position (its rows' masks in ChunkRows); -1: causal
};

// A chunk's sequences and the books of their pages; for a batch also every
// row's position and sequence (device), so one launch stores the whole
// chunk's keys and values. The last stepwise_rows rows are those of stepwise
// runs (batches only). With token trees, every row's RoPE position and
// `tree_words` words of ancestor bits a row (device), and their rows for the
// host layers; or, when the trees run stepwise, each row's parent within its
// run (AttentionParams::path_parents) instead of the bits.
struct ChunkRows {
  std::span<const ChunkSequence> seqs;
  const KvPages* pages = nullptr;
  const int32_t* token_pos = nullptr;
  const int32_t* token_seq = nullptr;
  int64_t stepwise_rows = 0;
  const int32_t* token_rope_pos = nullptr;
  const uint32_t* tree_masks = nullptr;
  int tree_words = 0;
  const cpu::TreeRows* host_trees = nullptr;
  const int32_t* path_parents = nullptr;
};

// How a chunk's matrices multiply: cuBLAS from gemm_from tokens; below it
// the int8 GEMM when `int8` (decode batches, from int8_min_tokens), else the mat-vec.
struct MatmulPaths {
  int64_t gemm_from = 0;
  bool int8 = false;
};

// The paged KV pool of the layers [first_layer, ...) a runner holds; with
// `window` (a whole model), the sliding-window layers' own pool beside it,
// each layer at its place among its pool's layers (runtime/kv_window.h).
struct KvPool {
  uint16_t* k = nullptr;  // page 0, the first layer held
  uint16_t* v = nullptr;
  int64_t first_layer = 0, layers = 0;
  const DevicePageTable* table = nullptr;
  const KvWindowPlan* window = nullptr;  // null: every layer above
  uint16_t* window_k = nullptr;
  uint16_t* window_v = nullptr;
  const DevicePageTable* window_table = nullptr;
};

// One layer's K and V caches in its pool, and how to find a position's page.
struct LayerKv {
  uint16_t* k = nullptr;
  uint16_t* v = nullptr;
  const DevicePageTable* table = nullptr;
  int64_t page_stride = 0;  // elements from one page to the next
  KvPaging paging(SeqId seq) const { return {table->row(seq), page_stride}; }
  KvPaging every_row() const { return {table->table(), page_stride}; }
};

// How attn_output and ffn_down reach the residual stream: added to it, or,
// on a tensor-split rank, as partial products that `reducer` sums across the
// ranks, with the residual added by rank 0 alone.
struct ResidualSum {
  bool adds_residual = true;
  ResidualReducer* reducer = nullptr;
};

// The runner's kernel choices a pass follows (CudaRunnerOptions of the same names).
struct PassKernelChoices {
  int64_t int8_gemm_min_tokens;  // 0: quantized_gemm_min_tokens of each matrix's format
  int int8_gemm_widest_tile;     // QuantizedGemmParams::widest_tile
  bool super_block_activations;  // K-quant inputs of the int8 GEMM as super-block activations
  bool matvec_row_pairs;         // mat-vecs of 2 to 4 columns pair rows over two warps
  bool sequence_splits;          // decode attention of many sequences splits their keys (attention_sequence_splits)
};

class LayerPass {
 public:
  LayerPass(const ModelSpec& config, int64_t context, PassBuffers& act, Gemm& gemm, const KvPool& pool,
            int multiprocessors, PassKernelChoices choices, ResidualSum residual, cudaStream_t stream);

  // The keys a one-token step at `pos` is prepared for: the short-context
  // attention below kShortDecodeMaxKeys, else the whole context.
  int64_t decode_max_keys(int64_t pos) const {
    return pos < kShortDecodeMaxKeys && context_ > kShortDecodeMaxKeys ? kShortDecodeMaxKeys : context_;
  }
  // The shape of this model's attention launches (positions, rows and caches
  // left to the caller); layer l's (L) adds its window and sinks.
  AttentionParams attention_shape() const;
  AttentionParams attention_shape(const LayerOnDevice& L, int64_t l) const;
  LayerKv kv(int64_t layer) const;

  // The mixture-of-experts FFN of the layers that have one (the runner's).
  void set_experts(ExpertFfn* experts) { experts_ = experts; }
  cudaStream_t stream() const { return stream_; }
  PassBuffers& buffers() { return act_; }
  // h = act(gate) * up over n elements, layer l's activation.
  void activate(int64_t l, const float* gate, const float* up, int64_t n, float* h);

  // The running chunk's paths (set before its layers).
  void set_paths(MatmulPaths paths) { paths_ = paths; }
  const MatmulPaths& paths() const { return paths_; }
  bool int8_gemm_takes(const DeviceMatrix& m, int64_t n) const {
    const int64_t from = choices_.int8_gemm_min_tokens ? choices_.int8_gemm_min_tokens : quantized_gemm_min_tokens(m.type);
    return paths_.int8 && n >= from && n < paths_.gemm_from && quantized_gemm_supported(m.type, m.cols);
  }
  // Whether every one of `matrices` multiplies n rows through the int8 GEMM on super-block activations.
  bool super_blocks_take(std::initializer_list<const DeviceMatrix*> matrices, int64_t n) const;
  // The int8 GEMM's launch of y (+)= m * in (in's q8 form), with this pass's scratch.
  QuantizedGemmParams int8_gemm_params(const DeviceMatrix& m, const Input& in, int64_t n, float* y, int64_t y_stride,
                                       bool accumulate);
  // y (+)= m * in; norm_out (one token through the mat-vec only) as in MatvecParams.
  void matmul(const DeviceMatrix& m, const Input& in, int64_t n, float* y, int64_t y_stride, bool accumulate,
              const NormOut& norm_out = {});
  // The input form of x's n rows of cols; the q8 form from row first_row of act.q8 on.
  Input prepare_input(const float* x, int64_t n, int64_t cols, bool use_gemm, int64_t first_row = 0);
  // Where super-block activations of n rows of cols go: act.q8 and the room of act.q8_scales.
  NormSuperBlocks super_block_buffers(int64_t n, int64_t cols) const;
  // x's n rows of cols as super-block activations.
  Input super_input(const float* x, int64_t n, int64_t cols);
  // The RMSNorm of act.x's n rows (weight `weight`) in the form the block's
  // matrices take: super-block activations (`super`), the f16 GEMM's input,
  // or f32 and q8; `normed_already`: a folded norm left it in act.xn.
  Input norm_input(const float* weight, int64_t n, bool use_gemm, bool super, bool normed_already);

  // Layer L (index l) over the chunk's first n rows as one chunk: mat-vec
  // columns or GEMM, prefill attention; `fold`: one token folding its norms,
  // `attn_folded`: the previous layer wrote this one's norm input, next_norm
  // the norm after it.
  void chunk_layer(const LayerOnDevice& L, int64_t l, int64_t n, bool use_gemm, bool fold, bool attn_folded,
                   const ChunkRows& rows, const float* next_norm);
  // Layer L over rows [first, n), those of stepwise runs: each with the
  // arithmetic of a one-token step (the decode mat-vec's, its folded norms
  // when `fold`, attention at its own key count), all rows sharing every
  // weight read.
  void stepwise_layer(const LayerOnDevice& L, int64_t l, int64_t first, int64_t n, bool fold, bool attn_folded,
                      const ChunkRows& rows, const float* next_norm);
  // Whether stepwise_layer over n rows gives each row blocks of its own in
  // every mat-vec of L (layer l; matvec_stepwise_columns_apart), `fold` as there.
  bool stepwise_columns_apart(const LayerOnDevice& L, int64_t l, int64_t n, bool fold) const;
  // The final norm and head over rows [first, n) as stepwise_layer computes
  // them, their logits from row `to` of act.logits on.
  void stepwise_head(const DeviceMatrix& output, const float* output_norm, int64_t first, int64_t n, bool fold, int64_t to);

 private:
  // Layer l's RoPE, cache store and attention over the chunk's rows; whether
  // attention also wrote wo's q8 input.
  bool attend(const LayerOnDevice& L, int64_t l, int64_t n, bool use_gemm, const ChunkRows& rows);
  RopeKvParams rope_shape(const LayerOnDevice& L, int64_t l) const;
  const LayerSpec& spec(int64_t l) const { return config_.layers[size_t(l)]; }
  // Whether layer l's Q and K go to RoPE as the projections leave them, its
  // pairs adjacent (a Llama layer): RoPE may then fold into a one-token attention launch.
  bool plain_rope(int64_t l) const;
  // RoPE and the cache store of `rope`'s tokens, with layer l's steps before RoPE.
  void rope_and_store(const LayerOnDevice& L, int64_t l, const RopeKvParams& rope);

  ModelSpec config_;
  int64_t context_;
  PassBuffers& act_;
  Gemm& gemm_;
  KvPool pool_;
  int multiprocessors_;
  PassKernelChoices choices_;
  ResidualSum residual_;
  cudaStream_t stream_;
  MatmulPaths paths_;
  ExpertFfn* experts_ = nullptr;
  std::vector<float> rope_magnitudes_;  // per layer (rope_magnitude)
};

}  // namespace nt

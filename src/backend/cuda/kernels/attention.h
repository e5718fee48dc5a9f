// Causal attention over the f16 KV cache, for decode (one token) and prefill
// (many): flash-style online softmax over tiles of keys, any context length,
// optionally within a sliding window.
// head_dim 64 and 128 run on tensor cores (f16 queries and probabilities, f32
// accumulation); other sizes in f32. The key range is split over several
// blocks when the queries alone would not fill the GPU; decode merges the
// splits in the same launch, prefill in a second kernel. Decode that sees at
// most kShortDecodeMaxKeys keys runs without splits, in f32. The rows of a
// token tree see their ancestors only (AttentionParams::tree_mask).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/kernels/kv_layout.h"
#include "runtime/kernel_shapes.h"  // attention_splits

namespace nt {


// One-token launches whose every replay sees at most this many keys
// (AttentionParams::max_keys) run the short-context decode kernel on sm_90
// and newer: a cluster of 4 blocks per query head, no split partials in
// memory (attention_decode_short.cu).
constexpr int64_t kShortDecodeMaxKeys = 1024;

// Decode only (one token, head_dim 64 or 128): the launch also applies RoPE
// to the raw query and the new key and stores this token's key and value in
// the cache, so no kernel runs between the Q/K/V mat-vec and attention.
struct AttentionRope {
  const float* inv_freq = nullptr;   // device: rope_pairs inverse frequencies; nullptr: q and the cache are ready
  int rope_pairs = 0;                // pairs (2i, 2i+1) rotated per head, i < rope_pairs
  const float* new_k = nullptr;      // raw key of KV head h at new_k + h*head_dim
  const float* new_v = nullptr;      // value of KV head h at new_v + h*head_dim
  uint16_t* k_cache = nullptr;       // the layer's caches (AttentionParams::k_cache, v_cache), written at pos
  uint16_t* v_cache = nullptr;
};

struct AttentionParams {
  const float* q = nullptr;          // token t, head h at q + t*q_stride + h*head_dim (RoPE applied)
  int64_t q_stride = 0;
  const uint16_t* k_cache = nullptr; // this layer (its page 0 when paged), f16, see paged_k_index / paged_v_index
  const uint16_t* v_cache = nullptr;
  int64_t context = 0;               // a multiple of kKvTile; unused when paged
  KvPaging paging;                   // the sequence's pages (n_seqs > 1: see seq_rows)
  float* out = nullptr;              // token t, head h at out + t*out_stride + h*head_dim
  int64_t out_stride = 0;
  const int32_t* pos = nullptr;      // device: position of token 0; token t sees keys 0..pos+t
  int64_t n_tokens = 0;
  int n_heads = 0, n_kv_heads = 0, head_dim = 0;
  // The previous kernel in the stream stored keys this launch reads besides
  // the one at pos (a stepwise run's, runtime/batch.h): the launch fetches no
  // key before that kernel's results are visible. (Placed in the padding
  // before max_keys: the launches' parameters keep their size.)
  bool keys_just_stored = false;
  int64_t max_keys = 0;              // one token: the most keys any run of this launch sees (pos < max_keys); 0: unknown
  int n_splits = 1;                  // key-range splits; > 1 needs `partials` (unused by the short-context decode)
  float scale = 0.0f;                // softmax scale of q.k; 0: 1/sqrt(head_dim)
  float* partials = nullptr;         // attention_partials_floats() floats
  AttentionRope rope;                // decode: RoPE and the cache store folded in
  int8_t* out_q8 = nullptr;          // decode: also the output as q8 activations (quantize_activations' format)
  float2* out_q8_scales = nullptr;
  // Decode of n_seqs > 1 sequences in one launch, one query each: sequence s's
  // query at q + s*q_stride, its output at out + s*out_stride, its position
  // pos[s], its pages at paging.pages + seq_rows[s] * table_width (rows of a
  // block table). No RoPE or q8 output; head_dim 64, 128 or 256. Splits
  // where attention_splits_sequences says (each sequence's partials
  // attention_sequence_partials_stride floats after the previous one's).
  // With max_keys > 0 (every sequence's) the short-context decode may take it.
  int64_t n_seqs = 1;
  const int32_t* seq_rows = nullptr;  // device
  int64_t table_width = 0;
  // A token tree's rows (one sequence, tokens cached in tree order): token t
  // sees the keys before tree_start and, from tree_start on, only key
  // tree_start + j whose bit j is set in its mask, words
  // tree_mask[t * tree_words ...] (its ancestors and itself). Null: causal.
  // Runs the prefill kernels, one token too; no RoPE or q8 output.
  const uint32_t* tree_mask = nullptr;  // device
  int64_t tree_start = 0;
  int tree_words = 0;
  // Or one token of a tree attending as the one-token step of its path does
  // (a stepwise tree row, runtime/batch.h): pos holds its path position (its
  // RoPE position) and its path's keys from tree_start on are its ancestors
  // and itself, each cached at tree_start plus its index in the tree:
  // path_parents[i] is the index of tree entry i's parent (-1: the root's),
  // path_self this token's. Short-context decode only
  // (attention_follows_tree_paths), no RoPE or q8 output.
  const int32_t* path_parents = nullptr;  // device
  int path_self = 0;
  // A sliding window (Gemma 3's local layers): a query at position p sees
  // the keys from p - window + 1 on; 0: every key. A token tree's positions
  // are its path positions (a tree row's RoPE position): with tree_mask,
  // tree_pos[i] is tree entry i's (device); with path_parents, pos is.
  int window = 0;
  const int32_t* tree_pos = nullptr;
  // Attention sinks (gpt-oss): per query head, a learned logit (in the units
  // of the scaled scores) that joins the softmax's denominator and weighs no
  // value, so a head may attend to little. Device, n_heads floats; null: none.
  const float* sinks = nullptr;
};


// Whether a query at position query_pos sees the key at key_pos under a window of `window` (0: every key).
__host__ __device__ inline bool in_window(int window, int64_t query_pos, int64_t key_pos) {
  return window == 0 || key_pos > query_pos - window;
}

// The path position of the key cached at `key` for a token tree's rows (AttentionParams::tree_pos).
__host__ __device__ inline int64_t tree_key_pos(const AttentionParams& p, int64_t key) {
  return key < p.tree_start ? key : int64_t(p.tree_pos[key - p.tree_start]);
}

// Whether key `key` is visible to a tree token whose mask words are `mask`
// (AttentionParams::tree_mask); the causal bound is checked apart.
__host__ __device__ inline bool tree_sees(const uint32_t* mask, int64_t tree_start, int64_t key) {
  if (key < tree_start) return true;
  const int64_t j = key - tree_start;
  return (mask[j / 32] >> (j % 32)) & 1u;
}

// Whether attention() runs n_seqs one-token sequences of this shape in one launch.
bool attention_multi_sequence_supported(int n_heads, int n_kv_heads, int head_dim);

// Whether attention() can fold RoPE, the cache store and the q8 output into a
// one-token launch of this shape (out_stride == n_heads * head_dim for q8).
bool attention_decode_fusion_supported(const AttentionParams& p);

// Whether attention() runs this one-token launch with the short-context decode
// kernel, whose launch of n_seqs sequences computes each exactly as a launch
// of it alone does.
bool attention_decodes_short(const AttentionParams& p);

// Whether attention() takes this launch of n_seqs > 1 sequences with its
// n_splits > 1: the tensor-core kernel, each sequence's split blocks merged
// in the launch.
bool attention_splits_sequences(const AttentionParams& p);

// Whether attention() runs this one-token shape with AttentionParams::path_parents.
bool attention_follows_tree_paths(const AttentionParams& p);

void attention(const AttentionParams& p, cudaStream_t stream);

}  // namespace nt

// Launch shapes and scratch sizes of the CUDA kernels, as host arithmetic: the
// memory plan sizes the runner's buffers from them in every build, GPU or not,
// and the kernels launch with the same numbers.
// Kept C++17 and free of CUDA headers: kernels include it too.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/align.h"

namespace nt {

// The K cache is laid out for decode, where lane j of a warp scores key j of
// a 32-key tile: per KV head, per tile, per 8-element chunk of the head, the
// 32 keys' chunks side by side, so a warp's 16-byte loads are contiguous.
// Needs head_dim % 8 == 0 and context % 32 == 0. V is [context][head_dim].
constexpr int kKvTile = 32;

// Positions the KV cache holds for `context` tokens: whole tiles.
constexpr int64_t kv_cache_context(int64_t context) { return align_up(context, kKvTile); }

constexpr int kAttentionMaxSplits = 256;       // key-range splits of one launch
constexpr int kAttentionMaxCountedKvHeads = 1024;  // split merge counters: KV heads (times sequences) of one launch
constexpr int kAttentionMaxRowElems = 4096;    // query rows * head_dim of a generic-kernel block
constexpr int kAttentionMmaRows = 64;          // query rows (tokens x group heads) of a tensor-core block

// Query rows of a generic attention block: tokens of one query tile times the
// heads of one KV group (row r = token_in_tile * group + head_in_group), so
// K/V are read once per group.
struct AttentionGeometry {
  int group = 1, tile_tokens = 1, rows = 1, n_tiles = 1;
};
AttentionGeometry attention_geometry(int64_t n_tokens, int n_heads, int n_kv_heads, int head_dim);

// The tensor-core kernel's shapes: head_dim 64 or 128, up to kAttentionMmaRows query heads per KV head.
bool mma_prefill_shape_supported(int n_heads, int n_kv_heads, int head_dim);
int64_t mma_prefill_query_tiles(int64_t n_tokens, int n_heads, int n_kv_heads);

// Key-range splits for a launch of n_tokens queries over up to max_keys keys
// on a GPU of `multiprocessors` SMs, and the partial-result floats they need.
int attention_splits(int64_t n_tokens, int n_heads, int n_kv_heads, int head_dim, int64_t max_keys, int multiprocessors);
size_t attention_partials_floats(int64_t n_tokens, int n_heads, int head_dim, int n_splits);

// A decode launch of many sequences (one token each) splits each sequence's
// keys into chunks of at least this many, so short sequences keep one block
// per KV head and write their outputs directly.
constexpr int64_t kSequenceSplitMinKeys = 256;

// Key-range splits of a decode launch of n_seqs sequences over up to max_keys
// keys each: enough that the blocks fill one wave of the GPU (two a
// multiprocessor), on the tensor-core kernel only; 1 when the sequences'
// blocks alone fill it.
int attention_sequence_splits(int64_t n_seqs, int n_heads, int n_kv_heads, int head_dim, int64_t max_keys,
                              int multiprocessors);

// Floats between two sequences' partials in a split launch of many sequences
// (each sequence's laid out as a one-token launch's), a multiple of 4 so that
// every sequence's rows stay 16-byte aligned.
constexpr int64_t attention_sequence_partials_stride(int n_heads, int head_dim, int n_splits) {
  return (int64_t(n_splits) * n_heads * (head_dim + 2) + 3) / 4 * 4;
}

// Argmax: a first-pass block scans kArgmaxChunk elements of a row into one
// 8-byte candidate (value, index).
constexpr int64_t kArgmaxChunk = 4096;
constexpr uint64_t kArgmaxCandidateBytes = 8;
uint64_t argmax_scratch_bytes(int64_t n_rows, int64_t n);

// The most logits top_logits selects; a chain that needs more takes the row.
constexpr int64_t kMaxTopLogits = 256;
constexpr int64_t kTopLogitsChunk = 4096;  // logits a first-pass block takes; at least kMaxTopLogits

// One selected logit; laid out as the sampler's Candidate, which this C++17
// header cannot include.
struct TopLogit {
  float logit;
  int32_t id;
};

// Scratch top_logits needs for rows of n logits.
uint64_t top_logits_scratch_bytes(int64_t n);

}  // namespace nt

#include "runtime/kernel_shapes.h"

#include <algorithm>

namespace nt {

AttentionGeometry attention_geometry(int64_t n_tokens, int n_heads, int n_kv_heads, int head_dim) {
  AttentionGeometry g;
  g.group = n_heads / n_kv_heads;
  const int max_rows = std::min(64, kAttentionMaxRowElems / head_dim);
  g.tile_tokens = int(std::clamp<int64_t>(max_rows / g.group, 1, std::max<int64_t>(n_tokens, 1)));
  g.rows = g.tile_tokens * g.group;
  g.n_tiles = int(ceil_div(n_tokens, g.tile_tokens));
  return g;
}

bool mma_prefill_shape_supported(int n_heads, int n_kv_heads, int head_dim) {
  return (head_dim == 64 || head_dim == 128) && n_heads / n_kv_heads <= kAttentionMmaRows;
}

int64_t mma_prefill_query_tiles(int64_t n_tokens, int n_heads, int n_kv_heads) {
  const int64_t tile_tokens = kAttentionMmaRows / (n_heads / n_kv_heads);
  return ceil_div(n_tokens, tile_tokens);
}

int attention_splits(int64_t n_tokens, int n_heads, int n_kv_heads, int head_dim, int64_t max_keys, int multiprocessors) {
  constexpr int64_t kKeyTile = kKvTile;  // one key per lane in the softmax step
  if (n_tokens == 1) {
    // One wave of decode blocks (two fit per multiprocessor), each with at
    // least one 64-key tile: on an H200 at context 512, 8 splits beat 4 and
    // 16; up to 128K keys no split count beat one wave.
    const int64_t wave = std::max<int64_t>(1, 2 * int64_t(multiprocessors) / n_kv_heads);
    const int64_t useful = ceil_div(max_keys, 2 * kKeyTile);
    return int(std::clamp<int64_t>(std::min(wave, useful), 1, kAttentionMaxSplits));
  }
  const bool mma = mma_prefill_shape_supported(n_heads, n_kv_heads, head_dim);
  const int64_t tiles = mma ? mma_prefill_query_tiles(n_tokens, n_heads, n_kv_heads)
                            : attention_geometry(n_tokens, n_heads, n_kv_heads, head_dim).n_tiles;
  const int64_t blocks = int64_t(n_kv_heads) * tiles;
  // Tensor-core blocks: one per multiprocessor is enough (splits cost a
  // combine kernel); the generic kernel's blocks are lighter.
  const int64_t target = (mma ? 1 : 2) * int64_t(multiprocessors);
  const int64_t wanted = ceil_div(target, blocks);
  const int64_t keys_per_split = (mma ? 8 : 4) * kKeyTile;  // at least 4 tiles of the kernel's width
  const int64_t useful = ceil_div(max_keys, keys_per_split);
  return int(std::clamp<int64_t>(std::min(wanted, useful), 1, kAttentionMaxSplits));
}

int attention_sequence_splits(int64_t n_seqs, int n_heads, int n_kv_heads, int head_dim, int64_t max_keys,
                              int multiprocessors) {
  const int64_t blocks = n_seqs * n_kv_heads;
  if (n_seqs < 2 || !mma_prefill_shape_supported(n_heads, n_kv_heads, head_dim) || blocks > kAttentionMaxCountedKvHeads) {
    return 1;
  }
  const int64_t wave = 2 * int64_t(multiprocessors) / blocks;
  const int64_t useful = ceil_div(max_keys, kSequenceSplitMinKeys);
  return int(std::clamp<int64_t>(std::min(wave, useful), 1, kAttentionMaxSplits));
}

size_t attention_partials_floats(int64_t n_tokens, int n_heads, int head_dim, int n_splits) {
  return n_splits > 1 ? size_t(n_splits) * size_t(n_tokens) * size_t(n_heads) * size_t(head_dim + 2) : 0;
}

uint64_t argmax_scratch_bytes(int64_t n_rows, int64_t n) {
  return uint64_t(n_rows) * uint64_t(ceil_div(n, kArgmaxChunk)) * kArgmaxCandidateBytes;
}

uint64_t top_logits_scratch_bytes(int64_t n) {
  return uint64_t(ceil_div(n, kTopLogitsChunk)) * (2 * kMaxTopLogits + 1) * 4;
}

}  // namespace nt

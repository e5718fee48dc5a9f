// The layout of the f16 KV cache on the GPU. Per layer, K is [kv_head] then
// tiles of kKvTile positions, each tile chunk-major (8 dims of every position
// of the tile, then the next 8), so that a warp reads a tile's keys as
// contiguous 16-byte chunks; V is [kv_head][position][head_dim].
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "runtime/kernel_shapes.h"  // kKvTile

namespace nt {

__host__ __device__ inline int64_t k_cache_index(int64_t kv_head, int64_t pos, int64_t d, int64_t context, int64_t head_dim) {
  return kv_head * context * head_dim + ((pos / kKvTile) * (head_dim / 8) + d / 8) * (kKvTile * 8) + (pos % kKvTile) * 8 + d % 8;
}

__host__ __device__ inline int64_t v_cache_index(int64_t kv_head, int64_t pos, int64_t d, int64_t context, int64_t head_dim) {
  return (kv_head * context + pos) * head_dim + d;
}

// The paged KV pool (runtime/kv_pages.h): pages of kKvTile positions, each
// holding those positions of every layer, a layer's laid out as above with
// context kKvTile, page_stride elements from one page to the next. A
// sequence's position pos lives in page pages[pos / kKvTile]. Without a page
// list the cache is one contiguous run of `context` positions.
// Elements of one page of the pool (its K, or its V) for `layers` layers.
inline int64_t kv_page_elems(int64_t layers, int64_t n_kv_heads, int64_t head_dim) {
  return layers * n_kv_heads * kKvTile * head_dim;
}

struct KvPaging {
  const int32_t* pages = nullptr;  // device: the sequence's pages in position order
  int64_t page_stride = 0;
};

__host__ __device__ inline int64_t paged_k_index(const KvPaging& paging, int64_t kv_head, int64_t pos, int64_t d,
                                                 int64_t context, int64_t head_dim) {
  if (!paging.pages) return k_cache_index(kv_head, pos, d, context, head_dim);
  return int64_t(paging.pages[pos / kKvTile]) * paging.page_stride + k_cache_index(kv_head, pos % kKvTile, d, kKvTile, head_dim);
}

__host__ __device__ inline int64_t paged_v_index(const KvPaging& paging, int64_t kv_head, int64_t pos, int64_t d,
                                                 int64_t context, int64_t head_dim) {
  if (!paging.pages) return v_cache_index(kv_head, pos, d, context, head_dim);
  return int64_t(paging.pages[pos / kKvTile]) * paging.page_stride + v_cache_index(kv_head, pos % kKvTile, d, kKvTile, head_dim);
}

}  // namespace nt

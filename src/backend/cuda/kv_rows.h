// K and V rows between the runner's device cache layout (attention.h: per
// slot and layer, [kv_head] then the tiled K or [context][head_dim] V) and a
// dense staging block [layer][row][kv_dim], for the layers of a hybrid split
// whose caches live on both sides of the link (host_layers.h); and rows
// moved within the cache (a token tree's accepted path).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace nt {

struct KvRowsParams {
  uint16_t* k_cache = nullptr;  // slot 0, layer 0; f16
  uint16_t* v_cache = nullptr;
  int64_t slot_stride = 0, layer_stride = 0;  // elements
  int64_t context = 0;                        // the cache's positions per slot (a multiple of kKvTile)
  int n_kv_heads = 0, head_dim = 0;
  const int32_t* layers = nullptr;  // device: the layers staged, n_layers of them
  int n_layers = 0;
  const int32_t* row_slot = nullptr;  // device: each row's slot and position
  const int32_t* row_pos = nullptr;
  int64_t n_rows = 0;
  uint16_t* k_staging = nullptr;  // device: [layer][row][kv_dim]
  uint16_t* v_staging = nullptr;
};

// The rows' K and V of every staged layer, cache -> staging.
void kv_rows_to_staging(const KvRowsParams& p, cudaStream_t stream);
// staging -> cache.
void kv_rows_from_staging(const KvRowsParams& p, cudaStream_t stream);

inline constexpr int kMaxKvRowMoves = 64;

// Every layer's K and V of row (slot[i], from[i]) to (slot[i], to[i]), the
// moves one after the other (a later one may read what an earlier wrote).
struct KvRowMoves {
  KvRowsParams caches;  // the caches' layout (layers, rows and staging unused)
  int n_layers = 0;     // every layer, 0 to n_layers - 1
  int n_moves = 0;      // at most kMaxKvRowMoves
  int32_t slot[kMaxKvRowMoves] = {}, from[kMaxKvRowMoves] = {}, to[kMaxKvRowMoves] = {};
};

void move_kv_rows(const KvRowMoves& p, cudaStream_t stream);

}  // namespace nt

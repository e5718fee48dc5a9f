// K and V rows between the runner's paged device caches (kv_layout.h: per
// page and layer, [kv_head] then the tiled K or [position][head_dim] V) and a
// dense staging block [layer][row][kv_dim], for the layers of a hybrid split
// whose caches live on both sides of the link (host_layers.h); and rows
// moved within the cache (a token tree's accepted path). A row is a page and
// a position within it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace nt {

struct KvRowsParams {
  uint16_t* k_cache = nullptr;  // page 0, layer 0; f16
  uint16_t* v_cache = nullptr;
  int64_t page_stride = 0, layer_stride = 0;  // elements
  int64_t page_size = 0;                      // positions per page (a multiple of kKvTile)
  int n_kv_heads = 0, head_dim = 0;
  const int32_t* layers = nullptr;  // device: the layers staged, n_layers of them
  int n_layers = 0;
  const int32_t* row_page = nullptr;  // device: each row's page and position in it
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

// Every layer's K and V of row (from_page[i], from[i]) to (to_page[i], to[i]),
// the moves one after the other (a later one may read what an earlier wrote).
struct KvRowMoves {
  KvRowsParams caches;  // the caches' layout (layers, rows and staging unused)
  int n_layers = 0;     // every layer, 0 to n_layers - 1
  int n_moves = 0;      // at most kMaxKvRowMoves
  int32_t from_page[kMaxKvRowMoves] = {}, from[kMaxKvRowMoves] = {};
  int32_t to_page[kMaxKvRowMoves] = {}, to[kMaxKvRowMoves] = {};
};

void move_kv_rows(const KvRowMoves& p, cudaStream_t stream);

}  // namespace nt

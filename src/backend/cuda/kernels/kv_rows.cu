#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels/kv_layout.h"
#include "backend/cuda/kernels/kv_rows.h"
#include "backend/cuda/kernels/launch.cuh"

namespace nt {
namespace {

// One block per (row, staged layer); threads over the row's kv_dim elements.
template <bool kToStaging>
__global__ void kv_rows_kernel(KvRowsParams p) {
  const int64_t row = blockIdx.x;
  const int staged = int(blockIdx.y);
  const int64_t kv_dim = int64_t(p.n_kv_heads) * p.head_dim;
  const int64_t base = int64_t(p.row_page[row]) * p.page_stride + int64_t(p.layers[staged]) * p.layer_stride;
  const int64_t pos = p.row_pos[row];
  const int64_t at = (int64_t(staged) * p.n_rows + row) * kv_dim;
  for (int64_t e = threadIdx.x; e < kv_dim; e += blockDim.x) {
    const int64_t head = e / p.head_dim, d = e % p.head_dim;
    uint16_t* k = p.k_cache + base + k_cache_index(head, pos, d, p.page_size, p.head_dim);
    uint16_t* v = p.v_cache + base + v_cache_index(head, pos, d, p.page_size, p.head_dim);
    if (kToStaging) {
      p.k_staging[at + e] = *k;
      p.v_staging[at + e] = *v;
    } else {
      *k = p.k_staging[at + e];
      *v = p.v_staging[at + e];
    }
  }
}

template <bool kToStaging>
void launch(const KvRowsParams& p, cudaStream_t stream) {
  if (p.n_rows == 0 || p.n_layers == 0) return;
  kv_rows_kernel<kToStaging><<<dim3(unsigned(p.n_rows), unsigned(p.n_layers)), 128, 0, stream>>>(p);
  NT_CUDA_CHECK(cudaGetLastError());
}

// One thread per (layer, element of a row), walking the moves in order: no
// two threads touch one element, so the order within each holds.
// Bytes moved: each moved row's K and V once read, once written (f16).
__global__ void kv_row_moves_kernel(KvRowMoves p) {
  const KvRowsParams& c = p.caches;
  const int64_t kv_dim = int64_t(c.n_kv_heads) * c.head_dim;
  const int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= kv_dim) return;
  const int64_t head = e / c.head_dim, d = e % c.head_dim;
  const int64_t layer = blockIdx.y;
  for (int i = 0; i < p.n_moves; ++i) {
    const int64_t from = int64_t(p.from_page[i]) * c.page_stride + layer * c.layer_stride;
    const int64_t to = int64_t(p.to_page[i]) * c.page_stride + layer * c.layer_stride;
    c.k_cache[to + k_cache_index(head, p.to[i], d, c.page_size, c.head_dim)] =
        c.k_cache[from + k_cache_index(head, p.from[i], d, c.page_size, c.head_dim)];
    c.v_cache[to + v_cache_index(head, p.to[i], d, c.page_size, c.head_dim)] =
        c.v_cache[from + v_cache_index(head, p.from[i], d, c.page_size, c.head_dim)];
  }
}

}  // namespace

void move_kv_rows(const KvRowMoves& p, cudaStream_t stream) {
  if (p.n_moves < 0 || p.n_moves > kMaxKvRowMoves) fail("{} KV row moves in one launch: 0 to {}", p.n_moves, kMaxKvRowMoves);
  if (p.n_moves == 0 || p.n_layers == 0) return;
  const int64_t kv_dim = int64_t(p.caches.n_kv_heads) * p.caches.head_dim;
  kv_row_moves_kernel<<<dim3(cuda::blocks_for(kv_dim, 128), unsigned(p.n_layers)), 128, 0, stream>>>(p);
  NT_CUDA_CHECK(cudaGetLastError());
}

void kv_rows_to_staging(const KvRowsParams& p, cudaStream_t stream) { launch<true>(p, stream); }
void kv_rows_from_staging(const KvRowsParams& p, cudaStream_t stream) { launch<false>(p, stream); }

}  // namespace nt

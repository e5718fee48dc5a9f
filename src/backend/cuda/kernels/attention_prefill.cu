// Prefill attention on tensor cores, flash-attention-2 style. A block holds
// 64 query rows (tokens x the query heads of one KV group, row r = token *
// group + head, so each K/V tile is read once per group), one warp per 16
// rows. K/V tiles of 64 keys stream through shared memory with cp.async,
// double buffered; S = Q K^T and O += P V run as mma.sync m16n8k16 with f16
// inputs and f32 accumulators; the softmax is online, in f32 registers, in
// base 2 (log2(e) is folded into the query scale). Decode (one token) runs
// here too: its `group` rows leave warps idle, but K/V stream through the
// same pipeline and the splits merge in the launch's last block per KV head.
#include <cuda_fp16.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels/attention_common.cuh"
#include "backend/cuda/kernels/launch.cuh"

namespace nt::attention_detail {
namespace {

constexpr int kWarps = kMmaRows / 16;
constexpr int kThreads = kWarps * 32;
constexpr int kKeys = 2 * kKvTile;  // keys per tile: two cache tiles, contiguous in both caches
constexpr int kPad = 8;             // halves after each Q/V row: ldmatrix's 8 rows then hit distinct banks
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Shared memory in halves: Q [kMmaRows][kRowStride], then two stages of
// K (the cache's own tile layout, [cache tile][8-dim chunk][key][8]) and
// V [kKeys][kRowStride].
template <int kHeadDim>
struct PrefillSmem {
  static constexpr int kRowStride = kHeadDim + kPad;
  static constexpr int kQ = kMmaRows * kRowStride;
  static constexpr int kK = kKeys * kHeadDim;
  static constexpr int kV = kKeys * kRowStride;
  static constexpr int kStage = kK + kV;
  static constexpr size_t kTileBytes = sizeof(uint16_t) * size_t(kQ + 2 * kStage);
  static constexpr size_t kBytes = kTileBytes + sizeof(float2) * (kHeadDim / 2);  // then RoPE's (cos, sin) per pair
};

// Which keys a row sees besides the causal bound: all of them (Llama and
// global layers), those in its sliding window, or a token tree's ancestors
// (within the window, if any, in path positions). Each a kernel of its own,
// so the causal one runs no mask code it does not need.
enum class KeyMask { Causal, Window, Tree };

// All but the most recent group have landed.
__device__ __forceinline__ void cp_async_wait_all_but_one() { asm volatile("cp.async.wait_group 1;" ::: "memory"); }

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(p)));
}

// c += a (16x16, row-major) * b (16x8, column-major).
__device__ __forceinline__ void mma_f16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// 2^x; 2^-inf = 0.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// With p.rope set (one token) the launch rotates the raw query and the new
// key itself and stores the new key and value in the cache: the first K/V
// tile is fetched before waiting for the Q/K/V mat-vec (every earlier key was
// stored by earlier launches; the new key's slot is patched in shared memory),
// and the (cos, sin) pairs are computed meanwhile.
// kMask: Window masks each row's keys before its window (p.window); Tree
// (p.tree_mask set) the keys from tree_start on by each row's ancestor bits,
// and with p.window every key outside the row's window of path positions.
// PRECOND: group <= kMmaRows, tile_tokens = kMmaRows / group; keys 0..pos+n_tokens-1 are in the cache
// (p.rope: keys 0..pos-1, and n_tokens == 1);
// q and out 16- and 8-byte aligned per row; merge_last: one token, n_splits <= kMaxSplits,
// n_seqs * n_kv_heads <= kMaxCountedKvHeads, (n_splits + 1) * group floats fit in the shared memory.
// Grid (KV head, query tile or sequence of a multi-sequence launch, split);
// a multi-sequence launch's splits cut each sequence's own keys (sequence_split_chunk).
// Bytes moved: the split's K/V rows once per query tile (f16, mostly L2 hits:
// the tiles of one KV head share them), queries once, outputs (or partials) once.
template <int kHeadDim, KeyMask kMask>
__global__ void __launch_bounds__(kThreads, 2)
    mma_prefill_kernel(AttentionParams p, int group, int tile_tokens, int n_tiles, bool merge_last) {
  NT_TRACE_BLOCK(kAttention);
  using Smem = PrefillSmem<kHeadDim>;
  constexpr int kStride = Smem::kRowStride;
  constexpr int kDimSteps = kHeadDim / 16;  // k-steps of Q K^T
  constexpr int kDimTiles = kHeadDim / 8;   // n-tiles of O
  constexpr int kKeyTiles = kKeys / 8;      // n-tiles of S
  constexpr int kPieces = kKeys * kHeadDim / 8;  // 16-byte pieces per K (or V) tile
  extern __shared__ __align__(16) uint16_t smem[];
  uint16_t* q_s = smem;
  auto k_stage = [&](int s) { return smem + Smem::kQ + s * Smem::kStage; };
  auto v_stage = [&](int s) { return smem + Smem::kQ + s * Smem::kStage + Smem::kK; };

  cuda::allow_dependents();
  const bool fused = p.rope.inv_freq != nullptr;
  if (!fused) cuda::wait_for_inputs();
  const int kv_head = blockIdx.x, split = blockIdx.z;
  if (p.n_seqs > 1) select_sequence(p, blockIdx.y);  // one query tile per sequence
  const int tile = p.n_seqs > 1 ? 0 : n_tiles - 1 - int(blockIdx.y);  // the longest causal ranges start first
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t pos0 = *p.pos;  // written before the launch chain: readable before the wait
  const int64_t t0 = int64_t(tile) * tile_tokens;
  const int tokens = int(std::min<int64_t>(tile_tokens, p.n_tokens - t0));
  const int rows = tokens * group;
  int64_t k_begin, k_end;  // of the keys visible to the tile's last token
  SplitMerge merge{};
  if (p.n_seqs > 1 && p.n_splits > 1) {
    // The sequence's own chunks: the blocks past its keys have nothing to do,
    // and a sequence of one chunk writes its outputs as an unsplit launch.
    const int64_t chunk = sequence_split_chunk(pos0 + 1, p.n_splits);
    const int chunks = int((pos0 + chunk) / chunk);
    if (split >= chunks) return;
    chunk_range(pos0 + 1, chunk, split, k_begin, k_end);
    merge = {int(blockIdx.y) * p.n_kv_heads + kv_head, chunks, chunks};
    if (chunks == 1) p.n_splits = 1;
  } else {
    split_range(pos0 + t0 + tokens, p.n_splits, split, k_begin, k_end);
    merge = one_sequence_merge(p, kv_head, pos0 + 1);
  }
  if constexpr (kMask == KeyMask::Window) {  // whole tiles before every row's window are skipped
    k_begin = std::min(k_end, std::max(k_begin, align_down(std::max<int64_t>(0, pos0 + t0 - p.window + 1), int64_t(kKeys))));
  }
  const int n_iter = int(ceil_div(k_end - k_begin, kKeys));

  // Keys past k_end are zero-filled (unwritten cache may hold NaN) and masked.
  // A tile's two cache tiles are looked up in the page table once each, not
  // for every 16 bytes (key0 is a multiple of kKeys).
  static_assert(kKeys == 2 * kKvTile, "a tile is two cache tiles");
  auto load_tile = [&](int stage, int64_t key0) {
    uint16_t* ks = k_stage(stage);
    uint16_t* vs = v_stage(stage);
    int64_t k_base[2] = {0, 0}, v_base[2] = {0, 0};
#pragma unroll
    for (int t = 0; t < 2; ++t) {
      if (key0 + t * kKvTile < k_end) {
        k_base[t] = paged_k_index(p.paging, kv_head, key0 + t * kKvTile, 0, p.context, kHeadDim);
        v_base[t] = paged_v_index(p.paging, kv_head, key0 + t * kKvTile, 0, p.context, kHeadDim);
      }
    }
    constexpr int kPiecesPerCacheTile = kKvTile * kHeadDim / 8;
    static_assert(kPieces % kThreads == 0);
#pragma unroll
    for (int j = 0; j < kPieces / kThreads; ++j) {
      const int i = tid + j * kThreads;
      const bool second = i >= kPiecesPerCacheTile;
      const int within = i % kPiecesPerCacheTile;  // (chunk, key) of the cache tile
      const bool valid = key0 + (second ? kKvTile : 0) + within % kKvTile < k_end;
      const uint16_t* src = valid ? p.k_cache + (second ? k_base[1] : k_base[0]) + within * 8 : p.k_cache;
      cp_async16(ks + i * 8, src, valid);
    }
#pragma unroll
    for (int j = 0; j < kPieces / kThreads; ++j) {
      const int i = tid + j * kThreads;
      const int k = i / (kHeadDim / 8), c = i % (kHeadDim / 8);
      const bool valid = key0 + k < k_end;
      const int64_t row = (k >= kKvTile ? v_base[1] : v_base[0]) + (k % kKvTile) * kHeadDim + c * 8;
      const uint16_t* src = valid ? p.v_cache + row : p.v_cache;
      cp_async16(vs + k * kStride + c * 8, src, valid);
    }
  };
  if (n_iter > 0) load_tile(0, k_begin);
  cp_async_commit();

  // Fused RoPE: (cos, sin) of each pair (identity past rope_pairs), and the
  // new key (rotated) and value of the block whose range ends with it, as f16
  // pairs: thread i < kHeadDim / 2 holds dims 2i, 2i + 1.
  float2* rot = reinterpret_cast<float2*>(reinterpret_cast<uint8_t*>(smem) + Smem::kTileBytes);
  const bool stores_new = fused && k_begin < k_end && k_end == pos0 + 1;
  uint32_t new_k = 0, new_v = 0;
  if (fused) {
    for (int i = tid; i < kHeadDim / 2; i += kThreads) {
      float sn = 0.0f, cs = 1.0f;
      if (i < p.rope.rope_pairs) sincosf(float(pos0) * p.rope.inv_freq[i], &sn, &cs);
      rot[i] = make_float2(cs, sn);
    }
    // The new key's place, from the page table (written before the chain), before the wait.
    const bool stores_pair = stores_new && tid < kHeadDim / 2;
    const int64_t new_k_at = stores_pair ? paged_k_index(p.paging, kv_head, pos0, 2 * tid, p.context, kHeadDim) : 0;
    const int64_t new_v_at = stores_pair ? paged_v_index(p.paging, kv_head, pos0, 2 * tid, p.context, kHeadDim) : 0;
    cuda::wait_for_inputs();
    __syncthreads();
    if (stores_new && tid < kHeadDim / 2) {
      const float2 k = *reinterpret_cast<const float2*>(p.rope.new_k + int64_t(kv_head) * kHeadDim + 2 * tid);
      const float2 v = *reinterpret_cast<const float2*>(p.rope.new_v + int64_t(kv_head) * kHeadDim + 2 * tid);
      const float2 r = rot[tid];
      const float2 rotated_k = cuda::rope_rotate(k.x, k.y, r.x, r.y);
      new_k = pack_half2(rotated_k.x, rotated_k.y);
      new_v = pack_half2(v.x, v.y);
      *reinterpret_cast<uint32_t*>(p.rope.k_cache + new_k_at) = new_k;
      *reinterpret_cast<uint32_t*>(p.rope.v_cache + new_v_at) = new_v;
    }
  }

  // Queries (rotated when fused), pre-scaled, as f16; rows past the tile are zeros.
  const float scale = (p.scale > 0.0f ? p.scale : rsqrtf(float(kHeadDim))) * kLog2e;
  for (int i = tid; i < kMmaRows * kHeadDim / 4; i += kThreads) {
    const int r = i / (kHeadDim / 4), c = i % (kHeadDim / 4);
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (r < rows) {
      const int64_t t = t0 + r / group;
      const int head = kv_head * group + r % group;
      v = *reinterpret_cast<const float4*>(p.q + t * p.q_stride + int64_t(head) * kHeadDim + c * 4);
      if (fused) {
        const float2 a = rot[2 * c], b = rot[2 * c + 1];
        const float2 lo = cuda::rope_rotate(v.x, v.y, a.x, a.y), hi = cuda::rope_rotate(v.z, v.w, b.x, b.y);
        v = make_float4(lo.x, lo.y, hi.x, hi.y);
      }
    }
    *reinterpret_cast<uint2*>(q_s + r * kStride + c * 4) =
        make_uint2(pack_half2(v.x * scale, v.y * scale), pack_half2(v.z * scale, v.w * scale));
  }
  __syncthreads();
  // A fragments of the warp's 16 rows: matrices (rows 0-7 | 8-15) x (dims 0-7 | 8-15) of each k-step.
  uint32_t qf[kDimSteps][4];
#pragma unroll
  for (int kd = 0; kd < kDimSteps; ++kd) ldmatrix_x4(qf[kd], q_s + (warp * 16 + (lane & 15)) * kStride + kd * 16 + (lane >> 4) * 8);

  // This thread's accumulator elements: rows g and g + 8 of the warp, columns 2q and 2q + 1 of each n-tile.
  const int g = lane >> 2, q = lane & 3;
  const int row0 = warp * 16 + g;
  const int64_t limit[2] = {std::min(pos0 + t0 + row0 / group, k_end - 1), std::min(pos0 + t0 + (row0 + 8) / group, k_end - 1)};
  const int64_t block_limit = std::min(pos0 + t0, k_end - 1);  // the smallest row limit
  float o[kDimTiles][4];
#pragma unroll
  for (int dt = 0; dt < kDimTiles; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

  const bool has_rows = warp * 16 < rows;  // else the warp only helps load
  for (int it = 0; it < n_iter; ++it) {
    const int64_t key0 = k_begin + int64_t(it) * kKeys;
    if (it + 1 < n_iter) load_tile((it + 1) & 1, key0 + kKeys);
    cp_async_commit();
    cp_async_wait_all_but_one();
    __syncthreads();
    if (stores_new && it == n_iter - 1) {  // the new key's slot was fetched before the key was stored
      const int key = int(pos0 - key0), d = 2 * tid;
      if (tid < kHeadDim / 2) {
        *reinterpret_cast<uint32_t*>(k_stage(it & 1) + (key / kKvTile) * (kKvTile * kHeadDim) + (d / 8) * (kKvTile * 8) +
                                     (key % kKvTile) * 8 + d % 8) = new_k;
        *reinterpret_cast<uint32_t*>(v_stage(it & 1) + key * kStride + d) = new_v;
      }
      __syncthreads();
    }
    if (!has_rows) {
      __syncthreads();
      continue;
    }
    const uint16_t* ks = k_stage(it & 1);
    const uint16_t* vs = v_stage(it & 1);

    // S = Q K^T. B fragments: matrices (chunk 2kd | 2kd + 1) x (keys 0-7 | 8-15 of the pair of n-tiles).
    float s[kKeyTiles][4];
#pragma unroll
    for (int nt = 0; nt < kKeyTiles; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
    for (int kd = 0; kd < kDimSteps; ++kd) {
#pragma unroll
      for (int np = 0; np < kKeyTiles / 2; ++np) {
        const int key = np * 16 + (lane >> 4) * 8 + (lane & 7);
        const int chunk = 2 * kd + ((lane >> 3) & 1);
        uint32_t b[4];
        ldmatrix_x4(b, ks + (key / kKvTile) * (kKvTile * kHeadDim) + chunk * (kKvTile * 8) + (key % kKvTile) * 8);
        mma_f16(s[2 * np], qf[kd], b[0], b[1]);
        mma_f16(s[2 * np + 1], qf[kd], b[2], b[3]);
      }
    }
    if (key0 + kKeys - 1 > block_limit) {  // causal edge or end of the range inside this tile
#pragma unroll
      for (int nt = 0; nt < kKeyTiles; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if (key0 + nt * 8 + 2 * q + (e & 1) > limit[e >> 1]) s[nt][e] = -INFINITY;
        }
      }
    }
    if constexpr (kMask == KeyMask::Window) {
      if (key0 < pos0 + t0 + (tokens - 1) - p.window + 1) {  // before the last row's window
#pragma unroll
        for (int nt = 0; nt < kKeyTiles; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int64_t row_pos = pos0 + t0 + (row0 + 8 * (e >> 1)) / group;
            if (!in_window(p.window, row_pos, key0 + nt * 8 + 2 * q + (e & 1))) s[nt][e] = -INFINITY;
          }
        }
      }
    }
    if constexpr (kMask == KeyMask::Tree) {
      if (key0 + kKeys > p.tree_start || p.window > 0) {  // keys of the tree: a row's ancestors only
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = row0 + 8 * h;
          if (r >= rows) continue;
          const uint32_t* mask = p.tree_mask + (t0 + r / group) * p.tree_words;
          const int64_t path_pos = p.window > 0 ? int64_t(p.tree_pos[t0 + r / group]) : 0;
#pragma unroll
          for (int nt = 0; nt < kKeyTiles; ++nt) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int64_t key = key0 + nt * 8 + 2 * q + e;
              // The window's test only where there is one: tree_pos is read only then.
              if (key <= limit[h] && (!tree_sees(mask, p.tree_start, key) ||
                                      (p.window > 0 && !in_window(p.window, path_pos, tree_key_pos(p, key))))) {
                s[nt][2 * h + e] = -INFINITY;
              }
            }
          }
        }
      }
    }

    // Online softmax; a row with no visible key yet keeps m = -inf and uses 0 as its base.
    float base[2], alpha[2], row_sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = m[h];
#pragma unroll
      for (int nt = 0; nt < kKeyTiles; ++nt) mx = fmaxf(mx, fmaxf(s[nt][2 * h], s[nt][2 * h + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      base[h] = mx == -INFINITY ? 0.0f : mx;
      alpha[h] = fast_exp2(m[h] - base[h]);
      m[h] = mx;
    }
#pragma unroll
    for (int nt = 0; nt < kKeyTiles; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[nt][e] = fast_exp2(s[nt][e] - base[e >> 1]);
        row_sum[e >> 1] += s[nt][e];
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) l[h] = l[h] * alpha[h] + row_sum[h];  // per-thread share; summed over the quad at the end
#pragma unroll
    for (int dt = 0; dt < kDimTiles; ++dt) {
      o[dt][0] *= alpha[0];
      o[dt][1] *= alpha[0];
      o[dt][2] *= alpha[1];
      o[dt][3] *= alpha[1];
    }

    // O += P V: the S accumulators of n-tiles 2kk, 2kk + 1 are the A fragment of
    // k-step kk; B fragments by transposed loads of V, matrices (keys 0-7 | 8-15) x (dims 0-7 | 8-15).
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      const uint32_t a[4] = {pack_half2(s[2 * kk][0], s[2 * kk][1]), pack_half2(s[2 * kk][2], s[2 * kk][3]),
                             pack_half2(s[2 * kk + 1][0], s[2 * kk + 1][1]), pack_half2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int dp = 0; dp < kDimTiles / 2; ++dp) {
        const int key = kk * 16 + ((lane >> 3) & 1) * 8 + (lane & 7);
        uint32_t b[4];
        ldmatrix_x4_trans(b, vs + key * kStride + dp * 16 + (lane >> 4) * 8);
        mma_f16(o[2 * dp], a, b[0], b[1]);
        mma_f16(o[2 * dp + 1], a, b[2], b[3]);
      }
    }
    __syncthreads();  // the stage is overwritten by the next iteration's prefetch
  }

#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
    const int r = row0 + 8 * h;
    if (r >= rows) continue;
    const int64_t t = t0 + r / group;
    const int head = kv_head * group + r % group;
    if (p.n_splits == 1) {
      const float inv = 1.0f / with_sink(p, head, m[h] * kLn2, l[h]);
      float* out = p.out + t * p.out_stride + int64_t(head) * kHeadDim + 2 * q;
#pragma unroll
      for (int dt = 0; dt < kDimTiles; ++dt) *reinterpret_cast<float2*>(out + dt * 8) = make_float2(o[dt][2 * h] * inv, o[dt][2 * h + 1] * inv);
    } else {
      float* acc = partial_acc(p, split, t, head) + 2 * q;
#pragma unroll
      for (int dt = 0; dt < kDimTiles; ++dt) *reinterpret_cast<float2*>(acc + dt * 8) = make_float2(o[dt][2 * h], o[dt][2 * h + 1]);
      if (q == 0) *partial_ml(p, split, t, head) = make_float2(m[h] * kLn2, l[h]);
    }
  }
  NT_TRACE_MID();
  if (merge_last && p.n_splits > 1) {
    merge_splits_if_last(p, merge, kv_head, group, reinterpret_cast<float*>(smem));  // tiles are dead
  } else if (p.out_q8) {  // one split: quantize the outputs this block wrote
    __syncthreads();
    const int quads = group * kHeadDim / 4;
    for (int i0 = 0; i0 < quads; i0 += kThreads) {
      const int i = i0 + tid;
      const bool active = i < quads;
      const int64_t at = int64_t(kv_head) * group * kHeadDim + (active ? i : 0) * 4;
      const float4 v = active ? make_float4(p.out[at], p.out[at + 1], p.out[at + 2], p.out[at + 3]) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      quantize_q8_quad(v, active, at, p.out_q8, p.out_q8_scales);
    }
  }
}

template <int kHeadDim, KeyMask kMask>
bool launch_for_head_dim(const AttentionParams& p, cudaStream_t stream) {
  const int group = p.n_heads / p.n_kv_heads;
  const int tile_tokens = kMmaRows / group;
  const int64_t n_tiles = mma_prefill_query_tiles(p.n_tokens, p.n_heads, p.n_kv_heads);
  const int64_t rows_of_blocks = p.n_seqs > 1 ? p.n_seqs : n_tiles;  // a multi-sequence launch's one token each: a block row each
  if (rows_of_blocks > 65535) fail("attention: {} query tiles or sequences exceed the grid's limit", rows_of_blocks);
  constexpr size_t smem = PrefillSmem<kHeadDim>::kBytes;
  const bool merge_last = mma_merges_in_launch(p);
  const auto kernel = mma_prefill_kernel<kHeadDim, kMask>;
  if (smem > 48 * 1024) {  // dynamic shared memory above 48 KiB must be opted into
    NT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  }
  cuda::launch_kernel(kernel, dim3(unsigned(p.n_kv_heads), unsigned(rows_of_blocks), unsigned(p.n_splits)), dim3(kThreads), smem,
                      stream, p, group, tile_tokens, int(n_tiles), merge_last);
  NT_CUDA_CHECK_LAUNCH();
  return merge_last;
}

}  // namespace

bool mma_merges_in_launch(const AttentionParams& p) {
  const size_t smem = p.head_dim == 64 ? PrefillSmem<64>::kBytes : PrefillSmem<128>::kBytes;
  return p.n_tokens == 1 && p.n_splits > 1 && p.n_splits <= kMaxSplits && p.n_seqs * p.n_kv_heads <= kMaxCountedKvHeads &&
         size_t(p.n_splits + 1) * size_t(p.n_heads / p.n_kv_heads) * 4 <= smem;
}

bool mma_prefill_supported(const AttentionParams& p) {
  const auto aligned = [](const void* ptr, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(ptr) % bytes == 0; };
  return mma_prefill_shape_supported(p.n_heads, p.n_kv_heads, p.head_dim) && aligned(p.q, 16) && p.q_stride % 4 == 0 &&
         aligned(p.out, 8) && p.out_stride % 2 == 0;
}

bool launch_mma_prefill(const AttentionParams& p, cudaStream_t stream) {
  // The tree's and the window's masks are kernels of their own: the causal kernels stay as they were.
  const auto launch = [&](auto mask) {
    constexpr KeyMask kMask = decltype(mask)::value;
    return p.head_dim == 64 ? launch_for_head_dim<64, kMask>(p, stream) : launch_for_head_dim<128, kMask>(p, stream);
  };
  if (p.tree_mask) return launch(std::integral_constant<KeyMask, KeyMask::Tree>{});
  if (p.window > 0) return launch(std::integral_constant<KeyMask, KeyMask::Window>{});
  return launch(std::integral_constant<KeyMask, KeyMask::Causal>{});
}

}  // namespace nt::attention_detail

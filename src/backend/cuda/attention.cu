#include "backend/cuda/attention.h"

#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_util.cuh"

namespace nt {
namespace {

constexpr int kThreads = 256;
constexpr int kKeyTile = 32;                    // one key per lane in the softmax step
constexpr int kMaxAcc = 16;                     // output accumulators per thread
constexpr int kMaxRowElems = kThreads * kMaxAcc; // query rows * head_dim per block

// Query rows of a block: tokens of one query tile times the heads of one KV
// group (row r = token_in_tile * group + head_in_group), so K/V are read once
// per group.
struct Geometry {
  int group = 1, tile_tokens = 1, rows = 1, n_tiles = 1;
};

Geometry geometry(int64_t n_tokens, int n_heads, int n_kv_heads, int head_dim) {
  Geometry g;
  g.group = n_heads / n_kv_heads;
  const int max_rows = std::min(64, kMaxRowElems / head_dim);
  g.tile_tokens = int(std::clamp<int64_t>(max_rows / g.group, 1, std::max<int64_t>(n_tokens, 1)));
  g.rows = g.tile_tokens * g.group;
  g.n_tiles = int((n_tokens + g.tile_tokens - 1) / g.tile_tokens);
  return g;
}

size_t shared_bytes(const Geometry& g, int head_dim) {
  return sizeof(float) * (size_t(g.rows) * head_dim + size_t(kKeyTile) * (head_dim + 1) + size_t(g.rows) * kKeyTile +
                          3 * size_t(g.rows));
}

// PRECOND: rows * head_dim <= kMaxRowElems; keys 0..pos+n_tokens-1 are in the cache.
// Grid (kv head, query tile, split). Bytes moved: each K/V row of the block's
// key range once (f16), its queries once, outputs (or partials) once.
__global__ void __launch_bounds__(kThreads) attention_kernel(AttentionParams p, Geometry g) {
  extern __shared__ float smem[];
  const int hd = p.head_dim;
  float* q_s = smem;                             // [rows][hd], pre-scaled
  float* kv_s = q_s + g.rows * hd;               // [kKeyTile][hd + 1]: K, then V
  float* s_s = kv_s + kKeyTile * (hd + 1);       // [rows][kKeyTile]: scores, then probabilities
  float* m_s = s_s + g.rows * kKeyTile;          // running max per row
  float* l_s = m_s + g.rows;                     // running sum per row
  float* alpha_s = l_s + g.rows;                 // rescale of the accumulators this tile

  const int kv_head = blockIdx.x, tile = blockIdx.y, split = blockIdx.z;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t pos0 = *p.pos;
  const int64_t t0 = int64_t(tile) * g.tile_tokens;
  const int tile_tokens = int(std::min<int64_t>(g.tile_tokens, p.n_tokens - t0));
  const int rows = tile_tokens * g.group;
  const int64_t n_keys = pos0 + t0 + tile_tokens;  // keys visible to the tile's last token
  const int64_t chunk = (n_keys + p.n_splits - 1) / p.n_splits;
  const int64_t chunk_rounded = (chunk + kKeyTile - 1) / kKeyTile * kKeyTile;
  const int64_t k_begin = std::min<int64_t>(n_keys, int64_t(split) * chunk_rounded);
  const int64_t k_end = std::min<int64_t>(n_keys, k_begin + chunk_rounded);
  const float scale = rsqrtf(float(hd));

  for (int i = tid; i < g.rows * hd; i += kThreads) {
    const int r = i / hd, d = i % hd;
    const int64_t t = t0 + r / g.group;
    const int head = kv_head * g.group + r % g.group;
    q_s[i] = r < rows ? p.q[t * p.q_stride + int64_t(head) * hd + d] * scale : 0.0f;
  }
  for (int r = tid; r < g.rows; r += kThreads) {
    m_s[r] = -INFINITY;
    l_s[r] = 0.0f;
  }
  float acc[kMaxAcc];
#pragma unroll
  for (int i = 0; i < kMaxAcc; ++i) acc[i] = 0.0f;

  const uint16_t* k_head = p.k_cache + int64_t(kv_head) * p.context * hd;
  const uint16_t* v_head = p.v_cache + int64_t(kv_head) * p.context * hd;
  auto load_tile = [&](const uint16_t* head_base, int64_t key0, int n) {
    for (int i = tid; i < kKeyTile * hd; i += kThreads) {
      const int k = i / hd, d = i % hd;
      kv_s[k * (hd + 1) + d] = k < n ? cuda::half_to_float(head_base[(key0 + k) * hd + d]) : 0.0f;
    }
  };

  for (int64_t key0 = k_begin; key0 < k_end; key0 += kKeyTile) {
    const int n = int(std::min<int64_t>(kKeyTile, k_end - key0));
    load_tile(k_head, key0, n);
    __syncthreads();
    // Scores: lane = key, warps over rows.
    for (int r = warp; r < g.rows; r += kThreads / 32) {
      const int64_t last_key = pos0 + t0 + r / g.group;
      const bool visible = r < rows && lane < n && key0 + lane <= last_key;
      float s = -INFINITY;
      if (visible) {
        s = 0.0f;
        const float* qr = q_s + r * hd;
        const float* kr = kv_s + lane * (hd + 1);
        for (int d = 0; d < hd; ++d) s += qr[d] * kr[d];
      }
      // Online softmax for row r over this tile.
      const float m_old = m_s[r];
      const float m_new = fmaxf(m_old, cuda::warp_max(s));
      const float prob = s == -INFINITY ? 0.0f : __expf(s - m_new);
      const float sum = cuda::warp_sum(prob);
      s_s[r * kKeyTile + lane] = prob;
      __syncwarp();
      if (lane == 0) {
        const float alpha = m_old == -INFINITY ? 0.0f : __expf(m_old - m_new);
        alpha_s[r] = alpha;
        l_s[r] = l_s[r] * alpha + sum;
        m_s[r] = m_new;
      }
    }
    __syncthreads();
    load_tile(v_head, key0, n);
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kMaxAcc; ++i) {
      const int e = tid + i * kThreads;
      if (e < g.rows * hd) {
        const int r = e / hd, d = e % hd;
        float a = acc[i] * alpha_s[r];
        const float* pr = s_s + r * kKeyTile;
        for (int k = 0; k < n; ++k) a += pr[k] * kv_s[k * (hd + 1) + d];
        acc[i] = a;
      }
    }
    __syncthreads();
  }

#pragma unroll
  for (int i = 0; i < kMaxAcc; ++i) {
    const int e = tid + i * kThreads;
    if (e >= rows * hd) continue;
    const int r = e / hd, d = e % hd;
    const int64_t t = t0 + r / g.group;
    const int head = kv_head * g.group + r % g.group;
    if (p.n_splits == 1) {
      p.out[t * p.out_stride + int64_t(head) * hd + d] = acc[i] / l_s[r];
    } else {
      float* part = p.partials + ((int64_t(split) * p.n_tokens + t) * p.n_heads + head) * (hd + 2);
      part[d] = acc[i];
      if (d == 0) {
        part[hd] = m_s[r];
        part[hd + 1] = l_s[r];
      }
    }
  }
}

// PRECOND: every split wrote its partial (an empty split has l = 0).
// One block per (token, head); bytes moved: the partials once, the output once.
__global__ void combine_splits_kernel(AttentionParams p) {
  const int64_t t = blockIdx.x / p.n_heads;
  const int head = int(blockIdx.x % p.n_heads);
  const int hd = p.head_dim;
  auto part = [&](int s) { return p.partials + ((int64_t(s) * p.n_tokens + t) * p.n_heads + head) * (hd + 2); };
  float m = -INFINITY;
  for (int s = 0; s < p.n_splits; ++s) {
    if (part(s)[hd + 1] > 0.0f) m = fmaxf(m, part(s)[hd]);
  }
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float num = 0.0f, den = 0.0f;
    for (int s = 0; s < p.n_splits; ++s) {
      const float* ps = part(s);
      if (ps[hd + 1] > 0.0f) {
        const float w = __expf(ps[hd] - m);
        num += w * ps[d];
        den += w * ps[hd + 1];
      }
    }
    p.out[t * p.out_stride + int64_t(head) * hd + d] = num / den;
  }
}

}  // namespace

int attention_splits(int64_t n_tokens, int n_heads, int n_kv_heads, int head_dim, int64_t max_keys, int multiprocessors) {
  const Geometry g = geometry(n_tokens, n_heads, n_kv_heads, head_dim);
  const int64_t blocks = int64_t(n_kv_heads) * g.n_tiles;
  const int64_t wanted = (2 * int64_t(multiprocessors) + blocks - 1) / blocks;
  const int64_t useful = (max_keys + 4 * kKeyTile - 1) / (4 * kKeyTile);  // at least 4 tiles per split
  return int(std::clamp<int64_t>(std::min(wanted, useful), 1, 256));
}

size_t attention_partials_floats(int64_t n_tokens, int n_heads, int head_dim, int n_splits) {
  return n_splits > 1 ? size_t(n_splits) * size_t(n_tokens) * size_t(n_heads) * size_t(head_dim + 2) : 0;
}

void attention(const AttentionParams& p, cudaStream_t stream) {
  if (p.n_tokens == 0) return;
  if (p.n_heads % p.n_kv_heads != 0) fail("attention: {} heads is not a multiple of {} KV heads", p.n_heads, p.n_kv_heads);
  const Geometry g = geometry(p.n_tokens, p.n_heads, p.n_kv_heads, p.head_dim);
  if (g.rows * p.head_dim > kMaxRowElems) {
    fail("attention: {} query heads per KV head of dimension {} exceed this kernel's {} elements per block", g.group,
         p.head_dim, kMaxRowElems);
  }
  if (p.n_splits > 1 && !p.partials) fail("attention: {} splits need a partials buffer", p.n_splits);
  const size_t smem = shared_bytes(g, p.head_dim);
  if (smem > 48 * 1024) {  // dynamic shared memory above 48 KiB must be opted into
    NT_CUDA_CHECK(cudaFuncSetAttribute(attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  }
  attention_kernel<<<dim3(unsigned(p.n_kv_heads), unsigned(g.n_tiles), unsigned(p.n_splits)), kThreads, smem, stream>>>(p, g);
  NT_CUDA_CHECK_LAUNCH();
  if (p.n_splits > 1) {
    combine_splits_kernel<<<unsigned(p.n_tokens * p.n_heads), 128, 0, stream>>>(p);
    NT_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace nt

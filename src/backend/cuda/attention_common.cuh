// What the attention kernels share: key-range splits, the layout of the
// per-split partial results, and the tensor-core prefill path's entry points.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/attention.h"
#include "backend/cuda/device_util.cuh"

namespace nt::attention_detail {

// Start and end of the key range of `split` when n_keys keys are visible:
// equal shares rounded up to whole cache tiles, so every range starts on one.
__device__ __forceinline__ void split_range(int64_t n_keys, int n_splits, int split, int64_t& begin, int64_t& end) {
  const int64_t chunk = ((n_keys + n_splits - 1) / n_splits + kKvTile - 1) / kKvTile * kKvTile;
  begin = std::min<int64_t>(n_keys, int64_t(split) * chunk);
  end = std::min<int64_t>(n_keys, begin + chunk);
}

// Partials of split s for (token t, head h): head_dim unnormalized outputs,
// 16-byte aligned rows for vector loads, then after all of those the pair
// (running max m in natural-log units, sum l); l == 0 marks an empty range.
__device__ __forceinline__ float* partial_acc(const AttentionParams& p, int split, int64_t t, int head) {
  return p.partials + ((int64_t(split) * p.n_tokens + t) * p.n_heads + head) * p.head_dim;
}

__device__ __forceinline__ float2* partial_ml(const AttentionParams& p, int split, int64_t t, int head) {
  float* ml = p.partials + int64_t(p.n_splits) * p.n_tokens * p.n_heads * p.head_dim;
  return reinterpret_cast<float2*>(ml) + (int64_t(split) * p.n_tokens + t) * p.n_heads + head;
}

constexpr int kMaxSplits = 256;

// Per KV head: how many of a one-token launch's split blocks have finished.
// The last one merges the splits and puts the count back to 0, so every
// launch (and every replay of a captured graph) starts from 0. Shared by all
// launches of a kernel file (static: each translation unit has its own), so
// split decodes must not run concurrently on several streams.
constexpr int kMaxCountedKvHeads = 1024;
static __device__ unsigned int g_splits_done[kMaxCountedKvHeads];

// Called by every thread of each split block of a one-token launch after it
// wrote its partials: the last block of the KV head to finish merges the
// splits into the outputs of the head's `group` query heads.
// PRECOND: n_splits <= kMaxSplits; scratch holds (n_splits + 1) * group floats.
// Bytes moved (last block only): every split's partials of the group once.
static __device__ void merge_splits_if_last(const AttentionParams& p, int kv_head, int group, float* scratch) {
  __shared__ bool last;
  __threadfence();  // this block's partials are visible device-wide before it is counted
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(&g_splits_done[kv_head], 1u) == unsigned(p.n_splits - 1);
  __syncthreads();
  if (!last) return;
  __threadfence();
  const int hd = p.head_dim, lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  float* weight = scratch;                        // [split][group]
  float* inv_den = scratch + p.n_splits * group;  // [group]
  // Partials of other blocks are read through L2 (__ldcg): L1 is not coherent.
  for (int g = warp; g < group; g += n_warps) {
    const int head = kv_head * group + g;
    float mx = -INFINITY;
    for (int s = lane; s < p.n_splits; s += 32) {
      const float2 ml = __ldcg(partial_ml(p, s, 0, head));
      if (ml.y > 0.0f) mx = fmaxf(mx, ml.x);
    }
    mx = cuda::warp_max(mx);
    float den = 0.0f;
    for (int s = lane; s < p.n_splits; s += 32) {
      const float2 ml = __ldcg(partial_ml(p, s, 0, head));
      const float w = ml.y > 0.0f ? __expf(ml.x - mx) : 0.0f;
      weight[s * group + g] = w;
      den += w * ml.y;
    }
    den = cuda::warp_sum(den);
    if (lane == 0) inv_den[g] = 1.0f / den;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < group * hd / 4; i += blockDim.x) {
    const int g = i / (hd / 4), d = i % (hd / 4) * 4;
    const int head = kv_head * group + g;
    float4 num = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 8
    for (int s = 0; s < p.n_splits; ++s) {  // independent loads: several in flight
      const float w = weight[s * group + g];
      const float4 a = __ldcg(reinterpret_cast<const float4*>(partial_acc(p, s, 0, head) + d));
      num.x += w * a.x;
      num.y += w * a.y;
      num.z += w * a.z;
      num.w += w * a.w;
    }
    float* out = p.out + int64_t(head) * hd + d;
    out[0] = num.x * inv_den[g];
    out[1] = num.y * inv_den[g];
    out[2] = num.z * inv_den[g];
    out[3] = num.w * inv_den[g];
  }
  if (threadIdx.x == 0) g_splits_done[kv_head] = 0;  // the launch's last access: the next launch starts from 0
}

// Tensor-core attention (attention_prefill.cu): prefill, and decode too, for
// head_dim 64 or 128 and up to kMmaRows query heads per KV head.
constexpr int kMmaRows = 64;  // query rows (tokens x group heads) per block

bool mma_prefill_shape_supported(int n_heads, int n_kv_heads, int head_dim);
// Also checks the alignment of queries and outputs for vector accesses.
bool mma_prefill_supported(const AttentionParams& p);
int64_t mma_prefill_query_tiles(int64_t n_tokens, int n_heads, int n_kv_heads);
// Returns whether the launch merged its splits itself (one token, scratch
// fits); otherwise a split launch needs the combine kernel after it.
bool launch_mma_prefill(const AttentionParams& p, cudaStream_t stream);

}  // namespace nt::attention_detail

// What the attention kernels share: key-range splits, the layout of the
// per-split partial results, and the tensor-core prefill path's entry points.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/kernels/attention.h"
#include "backend/cuda/kernels/device_util.cuh"
#include "core/align.h"

namespace nt::attention_detail {

// Keys per split are a multiple of this: whole tiles of the tensor-core kernel.
constexpr int kSplitKeys = 2 * kKvTile;

__host__ __device__ __forceinline__ int64_t split_chunk(int64_t n_keys, int n_splits) {
  return align_up(ceil_div(n_keys, n_splits), kSplitKeys);
}

// Start and end of the key range of `split` when n_keys keys are cut into chunks of `chunk`.
__device__ __forceinline__ void chunk_range(int64_t n_keys, int64_t chunk, int split, int64_t& begin, int64_t& end) {
  begin = std::min<int64_t>(n_keys, int64_t(split) * chunk);
  end = std::min<int64_t>(n_keys, begin + chunk);
}

// Start and end of the key range of `split` when n_keys keys are visible:
// equal shares rounded up to whole tiles, so every range starts on one; the
// splits past the keys get empty ranges.
__device__ __forceinline__ void split_range(int64_t n_keys, int n_splits, int split, int64_t& begin, int64_t& end) {
  chunk_range(n_keys, split_chunk(n_keys, n_splits), split, begin, end);
}

// A multi-sequence split launch's chunk for a sequence of n_keys keys: equal
// shares of whole tiles, at least kSequenceSplitMinKeys.
static_assert(kSequenceSplitMinKeys % kSplitKeys == 0, "sequence chunks are whole tiles");
__device__ __forceinline__ int64_t sequence_split_chunk(int64_t n_keys, int n_splits) {
  const int64_t chunk = split_chunk(n_keys, n_splits);
  return chunk < kSequenceSplitMinKeys ? kSequenceSplitMinKeys : chunk;
}

// How many leading splits hold keys.
__device__ __forceinline__ int splits_with_keys(int64_t n_keys, int n_splits) {
  const int64_t chunk = split_chunk(n_keys, n_splits);
  return int(std::min<int64_t>(n_splits, ceil_div(n_keys, chunk)));
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

// Points a multi-sequence launch's block (AttentionParams::n_seqs > 1) at
// sequence s: its query, output, position, row of the block table and, split,
// its partials (laid out as a one-token launch's).
__device__ __forceinline__ void select_sequence(AttentionParams& p, int64_t s) {
  p.q += s * p.q_stride;
  p.out += s * p.out_stride;
  p.pos += s;
  p.paging.pages += int64_t(p.seq_rows[s]) * p.table_width;
  if (p.n_splits > 1) p.partials += s * attention_sequence_partials_stride(p.n_heads, p.head_dim, p.n_splits);
}

// The denominator of query head `head`'s softmax whose scores sum to l
// relative to their maximum m (natural-log units), with the head's sink
// joined (AttentionParams::sinks).
__device__ __forceinline__ float with_sink(const AttentionParams& p, int head, float m, float l) {
  return p.sinks ? l + __expf(p.sinks[head] - m) : l;
}

constexpr int kMaxSplits = kAttentionMaxSplits;

// How the split blocks of one KV head (of one sequence) meet: `counter`
// indexes g_splits_done, `blocks` of them count in, and the first `merged`
// splits hold keys.
struct SplitMerge {
  int counter, blocks, merged;
};

// A one-sequence launch: every split block of the KV head counts, empty or not.
__device__ __forceinline__ SplitMerge one_sequence_merge(const AttentionParams& p, int kv_head, int64_t n_keys) {
  return {kv_head, p.n_splits, splits_with_keys(n_keys, p.n_splits)};
}

// Per KV head: how many of a one-token launch's split blocks have finished.
// The last one merges the splits and puts the count back to 0, so every
// launch (and every replay of a captured graph) starts from 0. Shared by all
// launches of a kernel file (static: each translation unit has its own), so
// split decodes must not run concurrently on several streams.
constexpr int kMaxCountedKvHeads = kAttentionMaxCountedKvHeads;
static __device__ unsigned int g_splits_done[kMaxCountedKvHeads];

__device__ __forceinline__ uint32_t shared_address(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }

// 16 bytes global -> shared; when !valid nothing is read and zeros are written.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(shared_address(dst)), "l"(src), "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// Quantizes 4 consecutive outputs per lane, 8 lanes (32 elements) per q8
// block, as quantize_q8_warp does for one per lane: q = round(x / d) with
// d = max|x| / 127, and the pair (d, d * sum q). `at` is the index of v.x in
// the row; every lane of the warp must call it (inactive lanes as groups of 8).
__device__ __forceinline__ void quantize_q8_quad(float4 v, bool active, int64_t at, int8_t* q8, float2* scales) {
  float amax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
#pragma unroll
  for (int o = 1; o < 8; o <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float d = amax / 127.0f;
  const float inv = d > 0.0f ? 1.0f / d : 0.0f;
  const int q0 = __float2int_rn(v.x * inv), q1 = __float2int_rn(v.y * inv), q2 = __float2int_rn(v.z * inv),
            q3 = __float2int_rn(v.w * inv);
  int sum = q0 + q1 + q2 + q3;
#pragma unroll
  for (int o = 1; o < 8; o <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (!active) return;
  *reinterpret_cast<uint32_t*>(q8 + at) = uint32_t(q0 & 0xff) | uint32_t(q1 & 0xff) << 8 | uint32_t(q2 & 0xff) << 16 | uint32_t(q3) << 24;
  if (at % 32 == 0) scales[at / 32] = make_float2(d, d * float(sum));
}

// Writes the 4 outputs of (head, dim d..d+3) of the one decode token, and
// their q8 form when asked for.
__device__ __forceinline__ void store_output_quad(const AttentionParams& p, int head, int d, float4 v, bool active) {
  const int64_t at = int64_t(head) * p.head_dim + d;
  if (active) {
    p.out[at] = v.x;
    p.out[at + 1] = v.y;
    p.out[at + 2] = v.z;
    p.out[at + 3] = v.w;
  }
  if (p.out_q8) quantize_q8_quad(v, active, at, p.out_q8, p.out_q8_scales);
}

// Called by every thread of each counted split block (SplitMerge) of a
// one-token launch after it wrote its partials: the last block of the KV head
// (of the sequence, in a multi-sequence launch) to finish merges the splits
// into the outputs of the head's `group` query heads. One thread
// counts the block after a barrier and a device-scope fence (the pattern of a
// grid-wide barrier). The merge issues all of a lane's loads at once: the
// (m, l) pairs of up to kMaxSplits splits in one round trip, then the
// partial outputs 16 splits per round trip; only splits that hold keys.
// PRECOND: n_splits <= kMaxSplits; scratch holds (n_splits + 1) * group floats;
// blockDim.x a multiple of 32.
// Bytes moved (last block only): the partials of the splits with keys once.
static __device__ void merge_splits_if_last(const AttentionParams& p, SplitMerge merge, int kv_head, int group, float* scratch) {
  __shared__ bool last;
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();  // the block's partials (ordered before by the barrier) are visible device-wide before it is counted
    last = atomicAdd(&g_splits_done[merge.counter], 1u) == unsigned(merge.blocks - 1);
    if (last) __threadfence();
  }
  __syncthreads();
  if (!last) return;
  const int hd = p.head_dim, lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  const int n_merged = merge.merged;
  float* weight = scratch;                        // [split][group]
  float* inv_den = scratch + p.n_splits * group;  // [group]
  // Partials of other blocks are read through L2 (__ldcg): L1 is not coherent.
  constexpr int kPerLane = kMaxSplits / 32;
  for (int g = warp; g < group; g += n_warps) {
    const int head = kv_head * group + g;
    float2 ml[kPerLane];
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int s = lane + 32 * j;
      ml[j] = s < n_merged ? __ldcg(partial_ml(p, s, 0, head)) : make_float2(0.0f, 0.0f);
    }
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      if (ml[j].y > 0.0f) mx = fmaxf(mx, ml[j].x);
    }
    mx = cuda::warp_max(mx);
    float den = 0.0f;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int s = lane + 32 * j;
      const float w = ml[j].y > 0.0f ? __expf(ml[j].x - mx) : 0.0f;
      if (s < n_merged) weight[s * group + g] = w;
      den += w * ml[j].y;
    }
    den = cuda::warp_sum(den);
    if (lane == 0) inv_den[g] = 1.0f / with_sink(p, head, mx, den);
  }
  __syncthreads();
  constexpr int kBatch = 16;
  const int quads = group * hd / 4;  // a multiple of 8: q8 blocks never straddle active and idle lanes
  for (int i0 = 0; i0 < quads; i0 += blockDim.x) {
    const int i = i0 + threadIdx.x;
    const bool active = i < quads;
    const int g = active ? i / (hd / 4) : 0, d = active ? i % (hd / 4) * 4 : 0;
    const int head = kv_head * group + g;
    float4 num = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int s0 = 0; s0 < n_merged; s0 += kBatch) {
      float4 a[kBatch];
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        a[j] = active && s0 + j < n_merged ? __ldcg(reinterpret_cast<const float4*>(partial_acc(p, s0 + j, 0, head) + d))
                                           : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const float w = s0 + j < n_merged ? weight[(s0 + j) * group + g] : 0.0f;
        num.x += w * a[j].x;
        num.y += w * a[j].y;
        num.z += w * a[j].z;
        num.w += w * a[j].w;
      }
    }
    const float inv = inv_den[g];
    store_output_quad(p, head, d, make_float4(num.x * inv, num.y * inv, num.z * inv, num.w * inv), active);
  }
  if (threadIdx.x == 0) g_splits_done[merge.counter] = 0;  // the launch's last access: the next launch starts from 0
}

// Short-context decode (attention_decode_short.cu): one token whose max_keys
// is at most kShortDecodeMaxKeys, head_dim 64 or 128, on sm_90 and newer
// (thread-block clusters); RoPE, the cache store and the q8 output folded in
// when asked.
bool short_decode_supported(const AttentionParams& p);
void launch_short_decode(const AttentionParams& p, cudaStream_t stream);

// Tensor-core attention (attention_prefill.cu): prefill, and decode too, for
// head_dim 64 or 128 and up to kMmaRows query heads per KV head.
constexpr int kMmaRows = kAttentionMmaRows;  // query rows (tokens x group heads) per block

// Also checks the alignment of queries and outputs for vector accesses.
bool mma_prefill_supported(const AttentionParams& p);
// Whether a launch of this (one-token, split) shape merges its splits itself.
bool mma_merges_in_launch(const AttentionParams& p);
// Returns whether the launch merged its splits itself (one token, scratch
// fits); otherwise a split launch needs the combine kernel after it.
bool launch_mma_prefill(const AttentionParams& p, cudaStream_t stream);

}  // namespace nt::attention_detail

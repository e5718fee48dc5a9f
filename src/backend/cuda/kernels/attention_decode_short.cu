// Decode attention for short contexts (up to kShortDecodeMaxKeys keys): a
// thread-block cluster of kRanks blocks per query head, each block scoring
// every kRanks-th 32-key tile; the blocks combine their (max, sum, output)
// through distributed shared memory, so there are no partials in global
// memory, no cross-block count and no merge launch. Every key but the new one
// was stored by earlier steps, so each block fetches its tiles before the
// dependency wait: V rows into shared memory (cp.async), a K tile per warp
// into registers (lane = key, the cache's tile layout). RoPE, the new key's
// cache store and the q8 output are folded in as in the tensor-core decode
// (AttentionRope). f32 arithmetic on the f16 cache. Bytes moved: K and V of
// one KV head per query head's cluster (a group's clusters share them
// through L2), q, out and its q8 form.
#include <cooperative_groups.h>

#include <atomic>

#include "backend/cuda/kernels/attention_common.cuh"
#include "backend/cuda/kernels/launch.cuh"

namespace nt::attention_detail {
namespace {

namespace cg = cooperative_groups;

constexpr int kRanks = 4;                                          // blocks per query head
constexpr int kWarps = int(kShortDecodeMaxKeys) / (kRanks * kKvTile);  // one K tile per warp
constexpr int kThreads = kWarps * 32;
constexpr int kSlots = kWarps * kKvTile;  // keys per block: one per thread
static_assert(kThreads == kSlots);

template <int kHeadDim>
struct ShortSmem {
  static constexpr int kDimQuads = kHeadDim / 4;        // P V: 4 dims per thread
  static constexpr int kSlices = kThreads / kDimQuads;  // P V: key slices
  static constexpr size_t kV = size_t(kSlots) * kHeadDim * 2;         // V rows of the block's tiles, f16
  static constexpr size_t kScores = kV;                                 // float [kSlots]
  static constexpr size_t kPartial = kScores + kSlots * 4;              // float4 [kSlices][kDimQuads]
  static constexpr size_t kOut = kPartial + size_t(kSlices) * kHeadDim * 4;  // float [kHeadDim]: unnormalized output
  static constexpr size_t kQuery = kOut + kHeadDim * 4;                 // float [kHeadDim], rotated and scaled
  static constexpr size_t kNewKey = kQuery + kHeadDim * 4;              // float [kHeadDim]
  static constexpr size_t kScratch = kNewKey + kHeadDim * 4;           // float [32]
  static constexpr size_t kMaxSum = kScratch + 32 * 4;                  // float2 (max, sum) of the block's keys
  static constexpr size_t kTilePages = kMaxSum + 8;                     // int64 [kWarps]: where each tile's page starts
  static constexpr size_t kBytes = kTilePages + kWarps * 8;
};

[[maybe_unused]] __device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = cuda::warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  return cuda::warp_max(lane < kWarps ? scratch[lane] : -INFINITY);
}

// Key of slot s (warp s / 32's tile, lane s % 32) in block `rank`.
[[maybe_unused]] __device__ __forceinline__ int slot_key(int slot, int rank) {
  return ((slot / kKvTile) * kRanks + rank) * kKvTile + slot % kKvTile;
}

// PRECOND: one token; pos + 1 <= kShortDecodeMaxKeys; head_dim == kHeadDim;
// launched in clusters of kRanks blocks (sm_90 and newer: the body is empty
// for older architectures, which never launch it). kWaitFirst
// (AttentionParams::keys_just_stored): nothing is fetched before the wait.
template <int kHeadDim, bool kWaitFirst>
__device__ __forceinline__ void short_decode(const AttentionParams& p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();
#else
  using Smem = ShortSmem<kHeadDim>;
  constexpr int kChunks = kHeadDim / 8;  // 16-byte chunks of a key
  extern __shared__ __align__(16) uint8_t smem[];
  uint16_t* v_s = reinterpret_cast<uint16_t*>(smem);
  float* scores = reinterpret_cast<float*>(smem + Smem::kScores);
  float4* partial = reinterpret_cast<float4*>(smem + Smem::kPartial);
  float* out_s = reinterpret_cast<float*>(smem + Smem::kOut);
  float* q_s = reinterpret_cast<float*>(smem + Smem::kQuery);
  float* new_k = reinterpret_cast<float*>(smem + Smem::kNewKey);
  float* scratch = reinterpret_cast<float*>(smem + Smem::kScratch);
  float2* max_sum = reinterpret_cast<float2*>(smem + Smem::kMaxSum);
  int64_t* tile_pages = reinterpret_cast<int64_t*>(smem + Smem::kTilePages);

  NT_TRACE_BLOCK(kAttention);
  cuda::allow_dependents();
  if constexpr (kWaitFirst) cuda::wait_for_inputs();
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = int(cluster.block_rank()), head = blockIdx.x / kRanks;
  const int group = p.n_heads / p.n_kv_heads, kv_head = head / group;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int pos0 = *p.pos;  // written before the launch chain: readable before the wait
  const int n_keys = pos0 + 1;
  if (n_keys > kShortDecodeMaxKeys) __trap();  // the host picks this kernel only for short contexts
  // Where key `key` of the token's path is cached: at its position, or for a
  // tree row (AttentionParams::path_parents) past tree_start at its tree
  // ancestor's index (the parents, like pos, were written before the chain).
  const auto cached_at = [&](int key) {
    if (!p.path_parents || key < p.tree_start) return key;
    int index = p.path_self;
    for (int up = pos0 - key; up > 0; --up) index = p.path_parents[index];
    return int(p.tree_start) + index;
  };

  // The pages of the block's tiles, read from the page table once instead of
  // for every 16 bytes fetched. A tree row's keys from tree_start on may lie
  // in other tiles: those are looked up key by key.
  const bool by_tile = p.paging.pages && !p.path_parents;
  if (by_tile && tid < kWarps) {
    const int tile = tid * kRanks + rank;
    tile_pages[tid] = tile * kKvTile < pos0 ? int64_t(p.paging.pages[tile]) * p.paging.page_stride : 0;
  }
  if (by_tile) __syncthreads();
  const auto v_at = [&](int slot, int key, int d) {
    return by_tile ? tile_pages[slot / kKvTile] + v_cache_index(kv_head, key % kKvTile, d, kKvTile, kHeadDim)
                   : paged_v_index(p.paging, kv_head, cached_at(key), d, p.context, kHeadDim);
  };
  const auto k_at = [&](int slot, int key) {
    return by_tile ? tile_pages[slot / kKvTile] + k_cache_index(kv_head, key % kKvTile, 0, kKvTile, kHeadDim)
                   : paged_k_index(p.paging, kv_head, cached_at(key), 0, p.context, kHeadDim);
  };

  // Before the wait: V rows and this warp's K tile of every key but the new one.
  for (int i = tid; i < kSlots * kChunks; i += kThreads) {
    const int slot = i / kChunks, key = slot_key(slot, rank);
    if (key < pos0) cp_async16(v_s + i * 8, p.v_cache + v_at(slot, key, (i % kChunks) * 8), true);
  }
  cp_async_commit();
  const int slot = warp * kKvTile + lane, key = slot_key(slot, rank);
  uint4 k_regs[kChunks];
  if (key < pos0) {  // lane's key in its tile's layout: 8 dims a chunk, a chunk every kKvTile * 8 elements
    const uint16_t* k_row = p.k_cache + k_at(slot, key);
#pragma unroll
    for (int c = 0; c < kChunks; ++c) k_regs[c] = *reinterpret_cast<const uint4*>(k_row + c * kKvTile * 8);
  }
  // The RoPE frequency of this thread's pair is loaded now and rotated after
  // the wait: sincosf here would keep the block from its wait for a load's latency.
  const bool fused = p.rope.inv_freq != nullptr;
  const bool rotates = fused && tid < p.rope.rope_pairs;
  const float inv_freq = rotates ? p.rope.inv_freq[tid] : 0.0f;
  // Where this thread's pair of the new key and value is cached, looked up in
  // the page table (written before the chain) before the wait too.
  const int own = cached_at(pos0);
  const int64_t own_k = tid < kHeadDim / 2 ? paged_k_index(p.paging, kv_head, own, 2 * tid, p.context, kHeadDim) : 0;
  const int64_t own_v = tid < kHeadDim / 2 ? paged_v_index(p.paging, kv_head, own, 2 * tid, p.context, kHeadDim) : 0;
  if constexpr (!kWaitFirst) cuda::wait_for_inputs();

  // The query (rotated, scaled), and the new key and value as the cache holds
  // them (f16): fused, from the raw projections, stored by one block of the
  // group's first head; otherwise from the cache, where the RoPE kernel put them.
  const int new_slot = ((pos0 / kKvTile) % kRanks == rank) ? (pos0 / kKvTile / kRanks) * kKvTile + pos0 % kKvTile : -1;
  if (tid < kHeadDim / 2) {
    float2 r = make_float2(1.0f, 0.0f);  // (cos, sin) of this pair's angle
    if (rotates) sincosf(float(pos0) * inv_freq, &r.y, &r.x);
    const float* q = p.q + int64_t(head) * kHeadDim + 2 * tid;
    const float scale = p.scale > 0.0f ? p.scale : rsqrtf(float(kHeadDim));
    const float2 rotated = cuda::rope_rotate(q[0], q[1], r.x, r.y);
    q_s[2 * tid] = rotated.x * scale;
    q_s[2 * tid + 1] = rotated.y * scale;
    if (new_slot >= 0 || (fused && head % group == 0 && rank == 0)) {
      uint32_t k_bits, v_bits;
      if (fused) {
        const float* k = p.rope.new_k + int64_t(kv_head) * kHeadDim + 2 * tid;
        const float* v = p.rope.new_v + int64_t(kv_head) * kHeadDim + 2 * tid;
        const float2 rotated_k = cuda::rope_rotate(k[0], k[1], r.x, r.y);
        k_bits = pack_half2(rotated_k.x, rotated_k.y);
        v_bits = pack_half2(v[0], v[1]);
        if (head % group == 0 && rank == 0) {
          *reinterpret_cast<uint32_t*>(p.rope.k_cache + own_k) = k_bits;  // fused: no tree path, own == pos0
          *reinterpret_cast<uint32_t*>(p.rope.v_cache + own_v) = v_bits;
        }
      } else {
        k_bits = *reinterpret_cast<const uint32_t*>(p.k_cache + own_k);
        v_bits = *reinterpret_cast<const uint32_t*>(p.v_cache + own_v);
      }
      if (new_slot >= 0) {
        const float2 k = __half22float2(*reinterpret_cast<const __half2*>(&k_bits));
        new_k[2 * tid] = k.x;
        new_k[2 * tid + 1] = k.y;
        *reinterpret_cast<uint32_t*>(v_s + new_slot * kHeadDim + 2 * tid) = v_bits;
      }
    }
  }
  __syncthreads();

  // Scores: lane j of warp w scores its tile's key j (within the window); the new key by warp 0.
  if (key < pos0 && in_window(p.window, pos0, key)) {
    float s = 0.0f;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const uint32_t w[4] = {k_regs[c].x, k_regs[c].y, k_regs[c].z, k_regs[c].w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float2 k = __half22float2(*reinterpret_cast<const __half2*>(&w[j]));
        s += q_s[c * 8 + 2 * j] * k.x + q_s[c * 8 + 2 * j + 1] * k.y;
      }
    }
    scores[slot] = s;
  } else if (slot != new_slot) {
    scores[slot] = -INFINITY;
  }
  if (warp == 0 && new_slot >= 0) {
    float s = 0.0f;
    for (int d = lane; d < kHeadDim; d += 32) s += q_s[d] * new_k[d];
    s = cuda::warp_sum(s);
    if (lane == 0) scores[new_slot] = s;
  }
  __syncthreads();

  // The block's (max, sum) and unnormalized output over its keys.
  const float m = block_max(scores[tid], scratch);
  const float e = m == -INFINITY ? 0.0f : __expf(scores[tid] - m);
  scores[tid] = e;
  const float l = cuda::block_sum(e, scratch);  // its barriers also publish the weights
  asm volatile("cp.async.wait_group 0;" ::: "memory");
  __syncthreads();  // every thread's V rows have landed
  const int quad = tid % Smem::kDimQuads, slice = tid / Smem::kDimQuads;
  float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  for (int s = slice; s < kSlots; s += Smem::kSlices) {
    if (slot_key(s, rank) >= n_keys) continue;  // stale shared memory; its weight is 0
    const uint2 raw = *reinterpret_cast<const uint2*>(v_s + s * kHeadDim + 4 * quad);
    const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&raw.x));
    const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&raw.y));
    const float w = scores[s];
    o.x += w * a.x;
    o.y += w * a.y;
    o.z += w * b.x;
    o.w += w * b.y;
  }
  partial[slice * Smem::kDimQuads + quad] = o;
  __syncthreads();
  if (tid < Smem::kDimQuads) {
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int s = 0; s < Smem::kSlices; ++s) {
      const float4 t = partial[s * Smem::kDimQuads + tid];
      v.x += t.x;
      v.y += t.y;
      v.z += t.z;
      v.w += t.w;
    }
    reinterpret_cast<float4*>(out_s)[tid] = v;
  }
  if (tid == 0) *max_sum = make_float2(m, l);
  cluster.sync();  // every block's (max, sum, output) is in its shared memory
  NT_TRACE_MID();

  if (rank == 0 && warp == 0) {
    float2 ms[kRanks];
    float top = -INFINITY;
#pragma unroll
    for (int r = 0; r < kRanks; ++r) {
      ms[r] = *cluster.map_shared_rank(max_sum, r);
      top = fmaxf(top, ms[r].x);
    }
    const bool active = lane < Smem::kDimQuads;
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    float total = 0.0f;
#pragma unroll
    for (int r = 0; r < kRanks; ++r) {
      const float f = ms[r].x == -INFINITY ? 0.0f : __expf(ms[r].x - top);
      total += f * ms[r].y;
      if (active) {
        const float4 t = cluster.map_shared_rank(reinterpret_cast<float4*>(out_s), r)[lane];
        v = make_float4(v.x + f * t.x, v.y + f * t.y, v.z + f * t.z, v.w + f * t.w);
      }
    }
    const float inv = 1.0f / with_sink(p, head, top, total);
    store_output_quad(p, head, 4 * lane, make_float4(v.x * inv, v.y * inv, v.z * inv, v.w * inv), active);
  }
  cluster.sync();  // the other blocks' shared memory stays until rank 0 has read it
#endif
}

template <int kHeadDim, bool kWaitFirst>
__global__ void __launch_bounds__(kThreads) short_decode_kernel(const AttentionParams p) {
  short_decode<kHeadDim, kWaitFirst>(p);
}

// n_seqs sequences (AttentionParams::n_seqs): blockIdx.y is the sequence,
// whose blocks do exactly what a launch for it alone does.
template <int kHeadDim, bool kWaitFirst>
__global__ void __launch_bounds__(kThreads) short_decode_seqs_kernel(AttentionParams p) {
  select_sequence(p, blockIdx.y);  // its position and block-table row were staged before the chain
  short_decode<kHeadDim, kWaitFirst>(p);
}

template <int kHeadDim, bool kWaitFirst>
void launch_short(const AttentionParams& p, cudaStream_t stream) {
  constexpr size_t bytes = ShortSmem<kHeadDim>::kBytes;
  const auto kernel = p.n_seqs > 1 ? short_decode_seqs_kernel<kHeadDim, kWaitFirst> : short_decode_kernel<kHeadDim, kWaitFirst>;
  static std::atomic<uint64_t> configured_one{0}, configured_seqs{0};
  cuda::allow_dynamic_shared_memory(kernel, bytes, p.n_seqs > 1 ? configured_seqs : configured_one);
  cuda::launch_cluster_kernel(kernel, kRanks, dim3(unsigned(p.n_heads * kRanks), unsigned(p.n_seqs)), dim3(kThreads), bytes,
                              stream, p);
  NT_CUDA_CHECK_LAUNCH();
}

template <int kHeadDim>
void launch_short(const AttentionParams& p, cudaStream_t stream) {
  if (p.keys_just_stored) {
    launch_short<kHeadDim, true>(p, stream);
  } else {
    launch_short<kHeadDim, false>(p, stream);
  }
}

}  // namespace

bool short_decode_supported(const AttentionParams& p) {
  return cuda::device_is_hopper_or_newer() && p.n_tokens == 1 && p.max_keys > 0 && p.max_keys <= kShortDecodeMaxKeys &&
         (p.head_dim == 64 || p.head_dim == 128) && p.n_kv_heads > 0 && p.n_heads % p.n_kv_heads == 0 &&
         (!p.out_q8 || p.out_stride == int64_t(p.n_heads) * p.head_dim);
}

void launch_short_decode(const AttentionParams& p, cudaStream_t stream) {
  if (p.head_dim == 64) {
    launch_short<64>(p, stream);
  } else {
    launch_short<128>(p, stream);
  }
}

}  // namespace nt::attention_detail

#include "backend/cuda/kernels/attention.h"

#include <algorithm>
#include <type_traits>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels/attention_common.cuh"
#include "backend/cuda/kernels/device_util.cuh"
#include "backend/cuda/kernels/launch.cuh"

namespace nt {
namespace {

using attention_detail::kMaxCountedKvHeads;
using attention_detail::kMaxSplits;
using attention_detail::merge_splits_if_last;
using attention_detail::partial_acc;
using attention_detail::partial_ml;
using attention_detail::select_sequence;
using attention_detail::split_range;
using attention_detail::with_sink;

constexpr int kThreads = 256;
constexpr int kKeyTile = kKvTile;               // one key per lane in the softmax step
constexpr int kMaxAcc = 16;                     // output accumulators per thread
constexpr int kMaxRowElems = kThreads * kMaxAcc; // query rows * head_dim per block
static_assert(kMaxRowElems == kAttentionMaxRowElems, "the host plans the generic kernel's tiles (runtime/kernel_shapes.h)");

using Geometry = AttentionGeometry;

size_t shared_bytes(const Geometry& g, int head_dim) {
  return sizeof(float) * (size_t(g.rows) * head_dim + size_t(kKeyTile) * (head_dim + 1) + size_t(g.rows) * kKeyTile +
                          3 * size_t(g.rows));
}

constexpr int kDecodeWarps = 4;
constexpr int kMaxGroup = 8;  // query heads per KV head the decode kernel handles

// PRECOND: rows * head_dim <= kMaxRowElems; keys 0..pos+n_tokens-1 are in the cache.
// A tree (p.tree_mask) also masks the keys from tree_start on by each row's ancestor bits.
// Grid (kv head, query tile, split). Bytes moved: each K/V row of the block's
// key range once (f16), its queries once, outputs (or partials) once.
__global__ void __launch_bounds__(kThreads) attention_kernel(AttentionParams p, Geometry g) {
  extern __shared__ float smem[];
  cuda::allow_dependents();
  cuda::wait_for_inputs();
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
  int64_t k_begin, k_end;  // of the keys visible to the tile's last token
  split_range(pos0 + t0 + tile_tokens, p.n_splits, split, k_begin, k_end);
  const float scale = p.scale > 0.0f ? p.scale : rsqrtf(float(hd));

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

  // Tiles start at multiples of kKeyTile, so each is one contiguous run of
  // kKeyTile * hd halves in both caches (K chunk-major, V row-major).
  auto load_tile = [&](bool is_k, int64_t key0, int n) {
    const uint16_t* src = (is_k ? p.k_cache + paged_k_index(p.paging, kv_head, key0, 0, p.context, hd)
                                : p.v_cache + paged_v_index(p.paging, kv_head, key0, 0, p.context, hd));
    for (int i = tid; i < kKeyTile * hd; i += kThreads) {
      const int k = is_k ? (i % (kKeyTile * 8)) / 8 : i / hd;
      const int d = is_k ? (i / (kKeyTile * 8)) * 8 + i % 8 : i % hd;
      kv_s[k * (hd + 1) + d] = k < n ? cuda::half_to_float(src[i]) : 0.0f;
    }
  };

  for (int64_t key0 = k_begin; key0 < k_end; key0 += kKeyTile) {
    const int n = int(std::min<int64_t>(kKeyTile, k_end - key0));
    load_tile(true, key0, n);
    __syncthreads();
    // Scores: lane = key, warps over rows.
    for (int r = warp; r < g.rows; r += kThreads / 32) {
      const int64_t last_key = pos0 + t0 + r / g.group;
      bool visible = r < rows && lane < n && key0 + lane <= last_key;
      if (visible && p.tree_mask) {
        visible = tree_sees(p.tree_mask + (t0 + r / g.group) * p.tree_words, p.tree_start, key0 + lane);
      }
      if (visible && p.window > 0) {  // a tree's rows measure the window in path positions
        visible = p.tree_mask ? in_window(p.window, p.tree_pos[t0 + r / g.group], tree_key_pos(p, key0 + lane))
                              : in_window(p.window, last_key, key0 + lane);
      }
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
    load_tile(false, key0, n);
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
      p.out[t * p.out_stride + int64_t(head) * hd + d] = acc[i] / with_sink(p, head, m_s[r], l_s[r]);
    } else {
      partial_acc(p, split, t, head)[d] = acc[i];
      if (d == 0) *partial_ml(p, split, t, head) = make_float2(m_s[r], l_s[r]);
    }
  }
}

// Decode (one query token): block = (KV head, split), each warp walks every
// kDecodeWarps-th tile of the split's keys. Scores: lane j scores key j of the
// tile against the group's query heads (16-byte K chunks, contiguous across
// the warp); values: lane owns kDimsPerLane dims of V. The warps' softmax
// states merge through shared memory at the end, the splits in the last
// block of the KV head to finish (merge_splits_if_last).
// PRECOND: head_dim == 32 * kDimsPerLane; group <= kGroupCap <= kMaxGroup; n_tokens == 1;
// n_splits <= kMaxSplits.
// Bytes moved: the split's K and V rows once (f16), queries once, partials
// twice (written, read by the merging block), outputs once.
template <int kDimsPerLane, int kGroupCap>
__global__ void __launch_bounds__(kDecodeWarps * 32) attention_decode_kernel(AttentionParams p) {
  constexpr int hd = 32 * kDimsPerLane, kChunks = hd / 8;
  // V rows of a whole tile fit in registers up to 4 dims per lane.
  constexpr bool kPrefetchV = kDimsPerLane <= 4;
  using VRaw = std::conditional_t<kDimsPerLane == 2, uint32_t, uint2>;
  extern __shared__ float smem[];
  cuda::allow_dependents();
  cuda::wait_for_inputs();
  const int group = p.n_heads / p.n_kv_heads;
  float* q_s = smem;                                      // [group][hd], pre-scaled
  float* p_s = q_s + group * hd;                          // [warp][key][kMaxGroup] probabilities
  float* acc_s = p_s + kDecodeWarps * kKeyTile * kMaxGroup;  // [warp][group][hd]
  float* ml_s = acc_s + kDecodeWarps * group * hd;         // [warp][group][2]: m, l

  if (p.n_seqs > 1) select_sequence(p, blockIdx.z);
  const int kv_head = blockIdx.x, split = blockIdx.y;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t n_keys = int64_t(*p.pos) + 1;
  int64_t k_begin, k_end;
  split_range(n_keys, p.n_splits, split, k_begin, k_end);
  const float scale = p.scale > 0.0f ? p.scale : rsqrtf(float(hd));
  for (int i = threadIdx.x; i < group * hd; i += kDecodeWarps * 32) {
    q_s[i] = p.q[int64_t(kv_head) * group * hd + i] * scale;
  }
  __syncthreads();

  float m[kGroupCap], l[kGroupCap], acc[kGroupCap][kDimsPerLane];
#pragma unroll
  for (int g = 0; g < kGroupCap; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int e = 0; e < kDimsPerLane; ++e) acc[g][e] = 0.0f;
  }
  float* probs = p_s + warp * kKeyTile * kMaxGroup;
  for (int64_t key0 = k_begin + int64_t(warp) * kKeyTile; key0 < k_end; key0 += kDecodeWarps * kKeyTile) {
    const int n = int(std::min<int64_t>(kKeyTile, k_end - key0));
    // Scores of key key0 + lane. The tile's V rows are loaded together with
    // its K chunks, so one memory round trip serves the whole tile.
    const uint16_t* kt = p.k_cache + paged_k_index(p.paging, kv_head, key0, 0, p.context, hd) + lane * 8;
    const uint16_t* vt = p.v_cache + paged_v_index(p.paging, kv_head, key0, lane * kDimsPerLane, p.context, hd);
    uint4 kc[kChunks];
#pragma unroll
    for (int c = 0; c < kChunks; ++c) kc[c] = __ldg(reinterpret_cast<const uint4*>(kt + c * kKeyTile * 8));
    VRaw vraw[kPrefetchV ? kKeyTile : 1];
    if constexpr (kPrefetchV) {
#pragma unroll
      for (int j = 0; j < kKeyTile; ++j) vraw[j] = j < n ? __ldg(reinterpret_cast<const VRaw*>(vt + j * hd)) : VRaw{};
    }
    float s[kGroupCap];
#pragma unroll
    for (int g = 0; g < kGroupCap; ++g) s[g] = 0.0f;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      float kf[8];
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&reinterpret_cast<const uint32_t*>(&kc[c])[w]));
        kf[2 * w] = f.x;
        kf[2 * w + 1] = f.y;
      }
#pragma unroll
      for (int g = 0; g < kGroupCap; ++g) {
        if (g < group) {
          const float4 qa = *reinterpret_cast<const float4*>(q_s + g * hd + 8 * c);
          const float4 qb = *reinterpret_cast<const float4*>(q_s + g * hd + 8 * c + 4);
          s[g] += qa.x * kf[0] + qa.y * kf[1] + qa.z * kf[2] + qa.w * kf[3] + qb.x * kf[4] + qb.y * kf[5] +
                  qb.z * kf[6] + qb.w * kf[7];
        }
      }
    }
    // Online softmax per query head over this tile.
    const bool valid = lane < n && in_window(p.window, n_keys - 1, key0 + lane);
#pragma unroll
    for (int g = 0; g < kGroupCap; ++g) {
      if (g < group) {
        const float sv = valid ? s[g] : -INFINITY;
        const float m_new = fmaxf(m[g], cuda::warp_max(sv));
        const float prob = valid ? __expf(sv - m_new) : 0.0f;
        const float alpha = m[g] == -INFINITY ? 0.0f : __expf(m[g] - m_new);
        l[g] = l[g] * alpha + cuda::warp_sum(prob);
        m[g] = m_new;
#pragma unroll
        for (int e = 0; e < kDimsPerLane; ++e) acc[g][e] *= alpha;
        probs[lane * kMaxGroup + g] = prob;
      }
    }
    __syncwarp();
    // Values: lane's dims of each visible key, weighted per head.
    auto accumulate = [&](int j, const float* v) {
      const float4 pa = *reinterpret_cast<const float4*>(probs + j * kMaxGroup);
      const float4 pb = kGroupCap > 4 ? *reinterpret_cast<const float4*>(probs + j * kMaxGroup + 4) : pa;
      const float pj[kMaxGroup] = {pa.x, pa.y, pa.z, pa.w, pb.x, pb.y, pb.z, pb.w};
#pragma unroll
      for (int g = 0; g < kGroupCap; ++g) {
        if (g < group) {
#pragma unroll
          for (int e = 0; e < kDimsPerLane; ++e) acc[g][e] += pj[g] * v[e];
        }
      }
    };
    if constexpr (kPrefetchV) {
#pragma unroll
      for (int j = 0; j < kKeyTile; ++j) {  // rows past n are zeros with zero probability
        float v[kDimsPerLane];
        const uint32_t* words = reinterpret_cast<const uint32_t*>(&vraw[j]);
#pragma unroll
        for (int w = 0; w < kDimsPerLane / 2; ++w) {
          const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&words[w]));
          v[2 * w] = f.x;
          v[2 * w + 1] = f.y;
        }
        accumulate(j, v);
      }
    } else {
      for (int j = 0; j < n; ++j) {
        float v[kDimsPerLane];
#pragma unroll
        for (int w = 0; w < kDimsPerLane / 2; ++w) {
          const float2 f = __half22float2(*reinterpret_cast<const __half2*>(vt + j * hd + 2 * w));
          v[2 * w] = f.x;
          v[2 * w + 1] = f.y;
        }
        accumulate(j, v);
      }
    }
    __syncwarp();
  }

  // Merge the warps' states.
#pragma unroll
  for (int g = 0; g < kGroupCap; ++g) {
    if (g < group) {
#pragma unroll
      for (int e = 0; e < kDimsPerLane; ++e) acc_s[(warp * group + g) * hd + lane * kDimsPerLane + e] = acc[g][e];
      if (lane == 0) {
        ml_s[(warp * group + g) * 2] = m[g];
        ml_s[(warp * group + g) * 2 + 1] = l[g];
      }
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < group * hd; i += kDecodeWarps * 32) {
    const int g = i / hd, d = i % hd;
    float mx = -INFINITY;
    for (int w = 0; w < kDecodeWarps; ++w) mx = fmaxf(mx, ml_s[(w * group + g) * 2]);
    float num = 0.0f, den = 0.0f;
    for (int w = 0; w < kDecodeWarps; ++w) {
      const float mw = ml_s[(w * group + g) * 2];
      const float weight = mw == -INFINITY ? 0.0f : __expf(mw - mx);
      num += weight * acc_s[(w * group + g) * hd + d];
      den += weight * ml_s[(w * group + g) * 2 + 1];
    }
    const int head = kv_head * group + g;
    if (p.n_splits == 1) {
      p.out[int64_t(head) * hd + d] = num / with_sink(p, head, mx, den);
    } else {
      partial_acc(p, split, 0, head)[d] = num;
      if (d == 0) *partial_ml(p, split, 0, head) = make_float2(mx, den);
    }
  }
  // The probabilities and the warps' accumulators are dead: their space is the merge's scratch.
  if (p.n_splits > 1) merge_splits_if_last(p, attention_detail::one_sequence_merge(p, kv_head, n_keys), kv_head, group, p_s);
}

// merge_splits_if_last's (n_splits + 1) * group floats of scratch fit in the
// probabilities (kDecodeWarps * kKeyTile * kMaxGroup) and the accumulators
// (kDecodeWarps * group * head_dim, head_dim >= 64).
static_assert((kMaxSplits + 1 - kDecodeWarps * 64) * kMaxGroup <= kDecodeWarps * kKeyTile * kMaxGroup);
size_t decode_shared_bytes(int group, int head_dim) {
  return sizeof(float) * (size_t(group) * head_dim + size_t(kDecodeWarps) * kKeyTile * kMaxGroup +
                          size_t(kDecodeWarps) * group * head_dim + size_t(kDecodeWarps) * group * 2);
}

// Merges the splits of the prefill kernels (decode merges in its own launch).
// PRECOND: every split wrote its partial (an empty split has l = 0).
// One block per (token, head); bytes moved: the partials once, the output once.
__global__ void combine_splits_kernel(AttentionParams p) {
  cuda::allow_dependents();
  cuda::wait_for_inputs();
  const int64_t t = blockIdx.x / p.n_heads;
  const int head = int(blockIdx.x % p.n_heads);
  const int hd = p.head_dim;
  float m = -INFINITY;
  for (int s = 0; s < p.n_splits; ++s) {
    const float2 ml = *partial_ml(p, s, t, head);
    if (ml.y > 0.0f) m = fmaxf(m, ml.x);
  }
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float num = 0.0f, den = 0.0f;
    for (int s = 0; s < p.n_splits; ++s) {
      const float2 ml = *partial_ml(p, s, t, head);
      if (ml.y > 0.0f) {
        const float w = __expf(ml.x - m);
        num += w * partial_acc(p, s, t, head)[d];
        den += w * ml.y;
      }
    }
    p.out[t * p.out_stride + int64_t(head) * hd + d] = num / with_sink(p, head, m, den);
  }
}

void launch_generic(const AttentionParams& p, const Geometry& g, cudaStream_t stream) {
  const size_t smem = shared_bytes(g, p.head_dim);
  if (smem > 48 * 1024) {  // dynamic shared memory above 48 KiB must be opted into
    NT_CUDA_CHECK(cudaFuncSetAttribute(attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  }
  cuda::launch_kernel(attention_kernel, dim3(unsigned(p.n_kv_heads), unsigned(g.n_tiles), unsigned(p.n_splits)), dim3(kThreads),
                      smem, stream, p, g);
  NT_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool attention_decode_fusion_supported(const AttentionParams& p) {
  if (attention_detail::short_decode_supported(p)) return true;
  return p.n_tokens == 1 && p.n_kv_heads > 0 && p.n_heads % p.n_kv_heads == 0 && attention_detail::mma_prefill_supported(p) &&
         (p.n_splits == 1 || (attention_detail::mma_merges_in_launch(p) && p.partials));
}

bool attention_multi_sequence_supported(int n_heads, int n_kv_heads, int head_dim) {
  // The decode kernel's shapes: 2, 4 or 8 dims a lane, up to kMaxGroup query heads a KV head.
  return n_kv_heads > 0 && n_heads % n_kv_heads == 0 && n_heads / n_kv_heads <= kMaxGroup &&
         (head_dim == 64 || head_dim == 128 || head_dim == 256);
}

bool attention_splits_sequences(const AttentionParams& p) {
  return p.n_seqs > 1 && !attention_detail::short_decode_supported(p) && attention_detail::mma_prefill_supported(p) &&
         attention_detail::mma_merges_in_launch(p);
}

bool attention_decodes_short(const AttentionParams& p) {
  return p.n_tokens == 1 && attention_detail::short_decode_supported(p);
}

bool attention_follows_tree_paths(const AttentionParams& p) { return p.n_seqs == 1 && attention_decodes_short(p); }

void attention(const AttentionParams& p, cudaStream_t stream) {
  if (p.n_tokens == 0) return;
  if (p.n_kv_heads < 1 || p.n_heads % p.n_kv_heads != 0) {
    fail("attention: {} heads is not a multiple of {} KV heads", p.n_heads, p.n_kv_heads);
  }
  if (p.n_splits < 1 || p.n_splits > kMaxSplits) fail("attention: {} key-range splits, not 1..{}", p.n_splits, kMaxSplits);
  if (p.n_splits > 1 && !p.partials) fail("attention: {} splits need a partials buffer", p.n_splits);
  if ((p.rope.inv_freq || p.out_q8) && !attention_decode_fusion_supported(p)) {
    fail("attention: RoPE and q8 output fold only into one-token launches with head_dim 64 or 128 ({} tokens, head_dim {}, {} splits)",
         p.n_tokens, p.head_dim, p.n_splits);
  }
  if (p.rope.inv_freq && (!p.rope.new_k || !p.rope.new_v || !p.rope.k_cache || !p.rope.v_cache || p.rope.rope_pairs < 0 ||
                          p.rope.rope_pairs > p.head_dim / 2)) {
    fail("attention: fused RoPE needs the new key and value, the caches and 0..{} rotated pairs, got {}", p.head_dim / 2,
         p.rope.rope_pairs);
  }
  if (p.out_q8 && (!p.out_q8_scales || p.head_dim % 32 != 0)) fail("attention: q8 output needs scales and head_dim % 32 == 0");
  if (p.keys_just_stored && p.rope.inv_freq) {
    fail("attention: a launch with folded RoPE fetches keys before its wait, so it cannot read keys just stored");
  }
  if (p.head_dim % 8 != 0 || (!p.paging.pages && p.context % kKvTile != 0)) {
    fail("attention: head_dim {} must be a multiple of 8 and an unpaged cache's context {} of {}", p.head_dim, p.context, kKvTile);
  }
  if (p.paging.pages && p.paging.page_stride <= 0) fail("attention: paged caches {} elements apart", p.paging.page_stride);
  if (p.n_seqs > 1 && (!p.paging.pages || !p.seq_rows || p.table_width <= 0)) {
    fail("attention: {} sequences in one launch read a block table (pages, seq_rows, table_width {})", p.n_seqs, p.table_width);
  }
  if (p.n_seqs > 1 && (p.n_tokens != 1 || p.rope.inv_freq || p.out_q8 ||
                       !attention_multi_sequence_supported(p.n_heads, p.n_kv_heads, p.head_dim))) {
    fail("attention: {} sequences in one launch take one token each, no RoPE or q8 output, and head_dim 64, 128 "
         "or 256 with at most {} query heads per KV head (head_dim {}, {} heads, {} KV heads)",
         p.n_seqs, kMaxGroup, p.head_dim, p.n_heads, p.n_kv_heads);
  }
  if (p.n_seqs > 1 && p.n_splits > 1 && !attention_splits_sequences(p)) {
    fail("attention: {} sequences split {} ways need the tensor-core kernel (head_dim 64 or 128, no max_keys) and at most {} "
         "sequences times KV heads ({} KV heads)",
         p.n_seqs, p.n_splits, kMaxCountedKvHeads, p.n_kv_heads);
  }
  if (p.tree_mask && (p.n_seqs != 1 || p.rope.inv_freq || p.out_q8 || p.tree_words < 1 || p.tree_start < 0)) {
    fail("attention: a token tree's rows take one sequence, no RoPE or q8 output, and their mask words ({} a row, "
         "tree at {})",
         p.tree_words, p.tree_start);
  }
  if (p.path_parents && (p.n_seqs != 1 || p.tree_mask || p.rope.inv_freq || p.out_q8 || p.tree_start < 0 ||
                         !attention_follows_tree_paths(p))) {
    fail("attention: a tree row that follows its path takes the short-context decode of one token (at most {} keys, "
         "head_dim 64 or 128), without masks, RoPE or q8 output (max_keys {}, head_dim {})",
         kShortDecodeMaxKeys, p.max_keys, p.head_dim);
  }
  if (p.window < 0 || (p.window > 0 && p.tree_mask && !p.tree_pos)) {
    fail("attention: a window of {} keys (a token tree's rows need their path positions)", p.window);
  }
  if (!p.tree_mask && attention_detail::short_decode_supported(p)) {
    attention_detail::launch_short_decode(p, stream);
    return;
  }
  // Tensor cores for head_dim 64 and 128, decode included; the decode kernel
  // for the other head sizes it handles; the generic kernel for the rest.
  const int group = p.n_heads / p.n_kv_heads;
  const int dims_per_lane = p.head_dim / 32;
  bool merged = p.n_splits == 1;
  if (attention_detail::mma_prefill_supported(p)) {
    merged = attention_detail::launch_mma_prefill(p, stream) || merged;
  } else if (p.n_tokens == 1 && !p.tree_mask && group <= kMaxGroup && p.head_dim % 32 == 0 &&
             (dims_per_lane == 2 || dims_per_lane == 4 || dims_per_lane == 8)) {
    if (p.n_splits > 1 && p.n_kv_heads > kMaxCountedKvHeads) {
      fail("attention: {} KV heads exceed the {} split counters of the decode kernel", p.n_kv_heads, kMaxCountedKvHeads);
    }
    const size_t smem = decode_shared_bytes(group, p.head_dim);
    const dim3 grid(unsigned(p.n_kv_heads), unsigned(p.n_splits), unsigned(p.n_seqs));
    auto launch = [&](auto kernel) {
      if (smem > 48 * 1024) {
        NT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
      }
      cuda::launch_kernel(kernel, grid, dim3(kDecodeWarps * 32), smem, stream, p);
    };
    // Register arrays are sized for the group rounded up to a power of two.
    auto launch_dims = [&](auto dims) {
      constexpr int kDims = decltype(dims)::value;
      if (group <= 1) launch(attention_decode_kernel<kDims, 1>);
      else if (group <= 2) launch(attention_decode_kernel<kDims, 2>);
      else if (group <= 4) launch(attention_decode_kernel<kDims, 4>);
      else launch(attention_decode_kernel<kDims, 8>);
    };
    if (dims_per_lane == 2) launch_dims(std::integral_constant<int, 2>{});
    if (dims_per_lane == 4) launch_dims(std::integral_constant<int, 4>{});
    if (dims_per_lane == 8) launch_dims(std::integral_constant<int, 8>{});
    NT_CUDA_CHECK_LAUNCH();
    merged = true;  // in its last block per KV head
  } else {
    const Geometry g = attention_geometry(p.n_tokens, p.n_heads, p.n_kv_heads, p.head_dim);
    if (g.rows * p.head_dim > kMaxRowElems) {
      fail("attention: {} query heads per KV head of dimension {} exceed this kernel's {} elements per block", g.group,
           p.head_dim, kMaxRowElems);
    }
    launch_generic(p, g, stream);
  }
  if (!merged) {
    cuda::launch_kernel(combine_splits_kernel, dim3(unsigned(p.n_tokens * p.n_heads)), dim3(128), 0, stream, p);
    NT_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace nt

// Radix selection on order-preserving 32-bit keys, 8 bits a pass: a histogram
// of the next digit among the keys that share the digits chosen so far finds
// the digit of the k-th highest key. Then the keys above it, and the lowest
// indices of the keys equal to it, are written in index order (block scans),
// so that ties resolve as Candidates resolves them. Bytes moved: the row once,
// k keys and ids per 4096 logits, k candidates out.
#include "backend/cuda/kernels/top_logits.h"

#include <climits>
#include <cstdint>
#include <cub/block/block_scan.cuh>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels/launch.cuh"
#include "core/error.h"

namespace nt {
namespace {

constexpr int kChunk = int(kTopLogitsChunk);
constexpr int kChunkThreads = 512;
constexpr int kFinalThreads = 1024;
constexpr int kFinalItems = 8;  // candidates a final thread holds: 32 chunks of 256 fit
static_assert(kChunk >= kMaxTopLogits);

// Larger floats give larger keys. -0 is keyed as +0: float comparison holds
// them equal, so their order must come from the index.
__device__ __forceinline__ uint32_t order_key(float x) {
  const uint32_t b = __float_as_uint(x == 0.0f ? 0.0f : x);
  return b & 0x80000000u ? ~b : b | 0x80000000u;
}

__device__ __forceinline__ float key_value(uint32_t key) {
  return __uint_as_float(key & 0x80000000u ? key & 0x7fffffffu : ~key);
}

// The top k of a set: the keys whose digits under `mask` exceed `prefix`, and
// the first equal_taken (by index) of those whose digits equal it. Usually
// the mask covers the whole key (the k-th highest); a pass that finds the
// k-th key's bin taken whole stops early with a shorter mask.
struct Threshold {
  uint32_t prefix, mask;
  int equal_taken;
};

template <int kThreads>
struct SelectShared {
  using Scan = cub::BlockScan<int, kThreads>;
  typename Scan::TempStorage scan;
  int hist[256];
  int digit, remaining;
  bool whole_bin;  // the k-th key's bin is taken whole: no later pass needed
};

// PRECOND: 0 < k <= the items that are not padding (key 0, below every
// float but a NaN). Thread t holds items t * kItems ... in `keys`; every
// thread calls it.
template <int kThreads, int kItems>
__device__ Threshold select_threshold(const uint32_t (&keys)[kItems], int k, SelectShared<kThreads>& sh) {
  uint32_t prefix = 0, mask = 0;
  int remaining = k;  // of the keys matching prefix under mask, the rank sought
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += kThreads) sh.hist[i] = 0;
    __syncthreads();
    // (Aggregating each warp's equal digits with __match_any_sync before the
    // atomic was slower on the H200: 17.5 against 13.8 us at k 40.)
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      if ((keys[j] & mask) == prefix) atomicAdd(&sh.hist[(keys[j] >> shift) & 0xff], 1);
    }
    __syncthreads();
    if (threadIdx.x < 32) {  // lane l holds digits 255 - 8l down to 248 - 8l
      const int lane = int(threadIdx.x);
      int c[8], total = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j) total += c[j] = sh.hist[255 - 8 * lane - j];
      int inclusive = total;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const int v = __shfl_up_sync(~0u, inclusive, o);
        if (lane >= o) inclusive += v;
      }
      int above = inclusive - total;  // keys with a higher digit than this lane's
      if (above < remaining && remaining <= inclusive) {
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          if (above < remaining && remaining <= above + c[j]) {
            sh.digit = 255 - 8 * lane - j;
            sh.remaining = remaining - above;
            sh.whole_bin = remaining == above + c[j];
          }
          above += c[j];
        }
      }
    }
    __syncthreads();
    prefix |= uint32_t(sh.digit) << shift;
    mask |= 0xffu << shift;
    remaining = sh.remaining;
    if (sh.whole_bin) break;  // the same value in every thread
  }
  return {prefix, mask, remaining};
}

// emit(slot, item, key) for each item of the top k, slots 0, 1, ... in item order.
template <int kThreads, int kItems, class Emit>
__device__ void emit_top(const uint32_t (&keys)[kItems], Threshold t, Emit emit, SelectShared<kThreads>& sh) {
  using Scan = typename SelectShared<kThreads>::Scan;
  int equal = 0;
#pragma unroll
  for (int j = 0; j < kItems; ++j) equal += (keys[j] & t.mask) == t.prefix;
  int equal_before;
  Scan(sh.scan).ExclusiveSum(equal, equal_before);
  __syncthreads();  // the scan storage is used again
  static_assert(kItems <= 32, "taken items are bits of a word");
  uint32_t taken = 0;
#pragma unroll
  for (int j = 0, e = equal_before; j < kItems; ++j) {
    const uint32_t key = keys[j] & t.mask;
    if (key > t.prefix || (key == t.prefix && e++ < t.equal_taken)) taken |= 1u << j;
  }
  int slot;
  Scan(sh.scan).ExclusiveSum(__popc(taken), slot);
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    if (taken >> j & 1) emit(slot++, int(threadIdx.x) * kItems + j, keys[j]);
  }
}

constexpr int kChunkItems = kChunk / kChunkThreads;  // a thread's logits, loaded as two 16-byte loads
static_assert(kChunkItems == 8);

// Block b: the top k of x[b * kChunk, ...) (all of it when shorter than k),
// keys and ids at b * k in index order, and the chunk's lowest poisoned index.
__global__ void __launch_bounds__(kChunkThreads)
    chunk_top_kernel(const float* x, int64_t n, const int32_t* top_k, uint32_t* top_keys, int32_t* top_ids,
                     int32_t* first_poisoned) {
  __shared__ SelectShared<kChunkThreads> sh;
  __shared__ int poisoned;
  cuda::allow_dependents();
  const int64_t base = int64_t(blockIdx.x) * kChunk;
  const int count = int(min(int64_t(kChunk), n - base));
  const int first = int(threadIdx.x) * kChunkItems;
  if (threadIdx.x == 0) poisoned = INT_MAX;
  __syncthreads();
  cuda::wait_for_inputs();
  const int k = *top_k;
  if (k < 1 || k > kMaxTopLogits) __trap();  // the host checks top_logits_fits before it writes k
  float v[kChunkItems];
  if (first + kChunkItems <= count && reinterpret_cast<uintptr_t>(x) % 16 == 0) {
    const float4 a = *reinterpret_cast<const float4*>(x + base + first);
    const float4 b = *reinterpret_cast<const float4*>(x + base + first + 4);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  } else {
#pragma unroll
    for (int j = 0; j < kChunkItems; ++j) v[j] = first + j < count ? x[base + first + j] : -INFINITY;
  }
  uint32_t keys[kChunkItems];
#pragma unroll
  for (int j = 0; j < kChunkItems; ++j) {
    if (first + j < count && !(v[j] < INFINITY)) atomicMin(&poisoned, first + j);
    keys[j] = first + j < count ? order_key(v[j]) : 0u;  // padding
  }
  const Threshold t = select_threshold(keys, min(k, count), sh);
  uint32_t* out_keys = top_keys + int64_t(blockIdx.x) * k;
  int32_t* out_ids = top_ids + int64_t(blockIdx.x) * k;
  emit_top(keys, t, [&](int slot, int item, uint32_t key) {
    out_keys[slot] = key;
    out_ids[slot] = int32_t(base + item);
  }, sh);
  __syncthreads();
  if (threadIdx.x == 0) first_poisoned[blockIdx.x] = poisoned == INT_MAX ? INT_MAX : int32_t(base + poisoned);
}

// One block: the top k of the chunks' (count entries, contiguous since every
// chunk but the last gives k), sorted, and the row's lowest poisoned index.
__global__ void __launch_bounds__(kFinalThreads)
    final_top_kernel(const uint32_t* keys, const int32_t* ids, int64_t n, const int32_t* top_k,
                     const int32_t* first_poisoned, TopLogit* out, int32_t* poisoned) {
  __shared__ SelectShared<kFinalThreads> sh;
  __shared__ uint32_t best_keys[kMaxTopLogits];
  __shared__ int32_t best_ids[kMaxTopLogits];
  __shared__ int lowest_poisoned;
  cuda::allow_dependents();
  if (threadIdx.x == 0) lowest_poisoned = INT_MAX;
  __syncthreads();
  cuda::wait_for_inputs();
  const int k = *top_k;
  const int chunks = int(ceil_div(n, kChunk));
  const int count = (chunks - 1) * k + int(min(int64_t(k), n - int64_t(chunks - 1) * kChunk));
  if (count > kFinalThreads * kFinalItems) __trap();  // top_logits_fits
  for (int c = threadIdx.x; c < chunks; c += kFinalThreads) atomicMin(&lowest_poisoned, first_poisoned[c]);
  const int first = int(threadIdx.x) * kFinalItems;
  uint32_t mine[kFinalItems];
#pragma unroll
  for (int j = 0; j < kFinalItems; ++j) mine[j] = first + j < count ? keys[first + j] : 0u;  // padding
  const Threshold t = select_threshold(mine, k, sh);
  emit_top(mine, t, [&](int slot, int item, uint32_t key) {
    best_keys[slot] = key;
    best_ids[slot] = ids[item];
  }, sh);
  __syncthreads();
  const int tid = int(threadIdx.x);
  if (tid < k) {  // rank among the k: higher keys, then equal keys with lower ids
    const uint32_t key = best_keys[tid];
    const int32_t id = best_ids[tid];
    int rank = 0;
    for (int j = 0; j < k; ++j) rank += best_keys[j] > key || (best_keys[j] == key && best_ids[j] < id);
    out[rank] = TopLogit{key_value(key), id};
  }
  if (tid == 0) *poisoned = lowest_poisoned == INT_MAX ? -1 : lowest_poisoned;
}

int64_t chunks_of(int64_t n) { return ceil_div(n, kChunk); }

}  // namespace

bool top_logits_fits(int64_t n, int64_t k) {
  return n > 0 && n <= INT_MAX && k > 0 && k <= std::min<int64_t>(n, kMaxTopLogits) &&
         chunks_of(n) * k <= kFinalThreads * kFinalItems;
}

void top_logits(const float* x, int64_t n, const int32_t* k, TopLogit* out, int32_t* poisoned, void* scratch,
                cudaStream_t stream) {
  if (n <= 0 || n > INT_MAX) fail("top_logits over {} logits: 1 to {}", n, INT_MAX);
  const int64_t chunks = chunks_of(n);
  auto* keys = static_cast<uint32_t*>(scratch);
  auto* ids = reinterpret_cast<int32_t*>(keys + chunks * kMaxTopLogits);
  auto* first_poisoned = ids + chunks * kMaxTopLogits;
  cuda::launch_kernel(chunk_top_kernel, dim3(unsigned(chunks)), dim3(kChunkThreads), 0, stream, x, n, k, keys, ids,
                      first_poisoned);
  NT_CUDA_CHECK_LAUNCH();
  cuda::launch_kernel(final_top_kernel, dim3(1), dim3(kFinalThreads), 0, stream, keys, ids, n, k, first_poisoned, out, poisoned);
  NT_CUDA_CHECK_LAUNCH();
}

}  // namespace nt

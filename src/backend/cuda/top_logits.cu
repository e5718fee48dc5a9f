// Radix selection on order-preserving 32-bit keys, 8 bits a pass: a histogram
// of the next digit among the keys that share the digits chosen so far finds
// the digit of the k-th highest key. Then the keys above it, and the lowest
// indices of the keys equal to it, are written in index order (block scans),
// so that ties resolve as Candidates resolves them. Bytes moved: the row once,
// k keys and ids per 2048 logits, k candidates out.
#include "backend/cuda/top_logits.h"

#include <climits>
#include <cub/block/block_scan.cuh>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"
#include "core/error.h"

namespace nt {
namespace {

constexpr int kChunk = 2048;  // logits a first-pass block takes; at least kMaxTopLogits
constexpr int kChunkThreads = 256;
constexpr int kFinalThreads = 1024;
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

// The k-th highest key of a set, and how many keys equal to it the top k holds.
struct Threshold {
  uint32_t key;
  int equal_taken;
};

template <int kThreads>
struct SelectShared {
  using Scan = cub::BlockScan<int, kThreads>;
  typename Scan::TempStorage scan;
  int hist[256];
  int digit, remaining;
};

// Thread t's share of `count` items: a contiguous range, so that a scan over
// the threads follows the item order.
template <int kThreads>
__device__ __forceinline__ void thread_range(int count, int& begin, int& end) {
  const int per = (count + kThreads - 1) / kThreads;
  begin = min(count, int(threadIdx.x) * per);
  end = min(count, begin + per);
}

// PRECOND: 0 < k <= count; key_at(i) for i < count. Every thread calls it.
template <int kThreads, class KeyAt>
__device__ Threshold select_threshold(int count, int k, KeyAt key_at, SelectShared<kThreads>& sh) {
  int begin, end;
  thread_range<kThreads>(count, begin, end);
  uint32_t prefix = 0, mask = 0;
  int remaining = k;  // of the keys matching prefix under mask, the rank sought
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += kThreads) sh.hist[i] = 0;
    __syncthreads();
    for (int i = begin; i < end; ++i) {
      const uint32_t key = key_at(i);
      if ((key & mask) == prefix) atomicAdd(&sh.hist[(key >> shift) & 0xff], 1);
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
          }
          above += c[j];
        }
      }
    }
    __syncthreads();
    prefix |= uint32_t(sh.digit) << shift;
    mask |= 0xffu << shift;
    remaining = sh.remaining;
  }
  return {prefix, remaining};
}

// emit(slot, i) for each item of the top k, slots 0, 1, ... in item order.
template <int kThreads, class KeyAt, class Emit>
__device__ void emit_top(int count, Threshold t, KeyAt key_at, Emit emit, SelectShared<kThreads>& sh) {
  using Scan = typename SelectShared<kThreads>::Scan;
  int begin, end;
  thread_range<kThreads>(count, begin, end);
  int equal = 0;
  for (int i = begin; i < end; ++i) equal += key_at(i) == t.key;
  int equal_before;
  Scan(sh.scan).ExclusiveSum(equal, equal_before);
  __syncthreads();  // the scan storage is used again
  const auto taken = [&](uint32_t key, int& e) { return key > t.key || (key == t.key && e++ < t.equal_taken); };
  int count_taken = 0;
  for (int i = begin, e = equal_before; i < end; ++i) count_taken += taken(key_at(i), e);
  int slot;
  Scan(sh.scan).ExclusiveSum(count_taken, slot);
  for (int i = begin, e = equal_before; i < end; ++i) {
    if (taken(key_at(i), e)) emit(slot++, i);
  }
}

// Block b: the top k of x[b * kChunk, ...) (all of it when shorter than k),
// keys and ids at b * k in index order, and the chunk's lowest poisoned index.
__global__ void __launch_bounds__(kChunkThreads)
    chunk_top_kernel(const float* x, int64_t n, int k, uint32_t* top_keys, int32_t* top_ids, int32_t* first_poisoned) {
  __shared__ uint32_t keys[kChunk];
  __shared__ SelectShared<kChunkThreads> sh;
  __shared__ int poisoned;
  cuda::allow_dependents();
  cuda::wait_for_inputs();
  const int64_t base = int64_t(blockIdx.x) * kChunk;
  const int count = int(min(int64_t(kChunk), n - base));
  if (threadIdx.x == 0) poisoned = INT_MAX;
  __syncthreads();
  for (int i = threadIdx.x; i < count; i += kChunkThreads) {
    const float v = x[base + i];
    if (!(v < INFINITY)) atomicMin(&poisoned, i);
    keys[i] = order_key(v);
  }
  __syncthreads();
  const auto key_at = [&](int i) { return keys[i]; };
  const Threshold t = select_threshold(count, min(k, count), key_at, sh);
  uint32_t* out_keys = top_keys + int64_t(blockIdx.x) * k;
  int32_t* out_ids = top_ids + int64_t(blockIdx.x) * k;
  emit_top(count, t, key_at, [&](int slot, int i) {
    out_keys[slot] = keys[i];
    out_ids[slot] = int32_t(base + i);
  }, sh);
  if (threadIdx.x == 0) first_poisoned[blockIdx.x] = poisoned == INT_MAX ? INT_MAX : int32_t(base + poisoned);
}

// One block: the top k of the chunks' (count entries, contiguous since every
// chunk but the last gives k), sorted, and the row's lowest poisoned index.
__global__ void __launch_bounds__(kFinalThreads)
    final_top_kernel(const uint32_t* keys, const int32_t* ids, int count, int k, int chunks, const int32_t* first_poisoned,
                     TopLogit* out, int32_t* poisoned) {
  __shared__ SelectShared<kFinalThreads> sh;
  __shared__ uint32_t best_keys[kMaxTopLogits];
  __shared__ int32_t best_ids[kMaxTopLogits];
  __shared__ int lowest_poisoned;
  cuda::allow_dependents();
  cuda::wait_for_inputs();
  if (threadIdx.x == 0) lowest_poisoned = INT_MAX;
  __syncthreads();
  for (int c = threadIdx.x; c < chunks; c += kFinalThreads) atomicMin(&lowest_poisoned, first_poisoned[c]);
  const auto key_at = [&](int i) { return keys[i]; };
  const Threshold t = select_threshold(count, k, key_at, sh);
  emit_top(count, t, key_at, [&](int slot, int i) {
    best_keys[slot] = keys[i];
    best_ids[slot] = ids[i];
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

int64_t chunks_of(int64_t n) { return (n + kChunk - 1) / kChunk; }

}  // namespace

uint64_t top_logits_scratch_bytes(int64_t n) { return uint64_t(chunks_of(n)) * (2 * kMaxTopLogits + 1) * 4; }

void top_logits(const float* x, int64_t n, int64_t k, TopLogit* out, int32_t* poisoned, void* scratch, cudaStream_t stream) {
  if (n <= 0 || n > INT_MAX) fail("top_logits over {} logits: 1 to {}", n, INT_MAX);
  if (k <= 0 || k > std::min<int64_t>(n, kMaxTopLogits)) fail("top_logits: the top {} of {} logits (at most {})", k, n, kMaxTopLogits);
  const int64_t chunks = chunks_of(n);
  auto* keys = static_cast<uint32_t*>(scratch);
  auto* ids = reinterpret_cast<int32_t*>(keys + chunks * kMaxTopLogits);
  auto* first_poisoned = ids + chunks * kMaxTopLogits;
  cuda::launch_kernel(chunk_top_kernel, dim3(unsigned(chunks)), dim3(kChunkThreads), 0, stream, x, n, int(k), keys, ids,
                      first_poisoned);
  NT_CUDA_CHECK_LAUNCH();
  const int64_t count = (chunks - 1) * k + std::min(k, n - (chunks - 1) * kChunk);
  cuda::launch_kernel(final_top_kernel, dim3(1), dim3(kFinalThreads), 0, stream, keys, ids, int(count), int(k), int(chunks),
                      first_poisoned, out, poisoned);
  NT_CUDA_CHECK_LAUNCH();
}

}  // namespace nt

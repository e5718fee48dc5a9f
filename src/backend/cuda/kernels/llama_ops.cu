#include "backend/cuda/kernels/llama_ops.h"

#include <algorithm>
#include <limits>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels/attention.h"
#include "backend/cuda/kernels/device_util.cuh"
#include "backend/cuda/kernels/launch.cuh"

namespace nt {
namespace {

constexpr int kNormThreads = 256;
constexpr int kNormGroups = kNormThreads / 32;  // 32-element groups a block's warps take per pass

// PRECOND: dim % 32 == 0, x 16-byte aligned. Grid (row, slice): every block
// sums the squares of its whole row and normalizes (and quantizes) groups
// [slice * groups_per_slice, ...) of 32 elements, one warp per group. A
// single decode row so spreads over many multiprocessors, each thread issuing
// its loads at once, instead of one block walking the row with a weight load
// per step. Bytes moved: the row once from memory and once per slice from L2,
// the weights once, 4 (f32) + 1.25 (q8) per element written, or 1.14 for
// super-block activations (slices of whole super-blocks: the block's eight
// warps then take one each pass).
__global__ void __launch_bounds__(kNormThreads)
    rms_norm_kernel(const float* x, const float* weight, int64_t dim, float eps, float* out, int8_t* q8, float2* q8_scales,
                    NormSuperBlocks super_blocks, int64_t groups_per_slice) {
  NT_TRACE_BLOCK(kRmsNorm);
  __shared__ float scratch[32];
  __shared__ float super_block_max[2][kNormGroups];  // alternate iterations' maxima
  cuda::allow_dependents();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t row = blockIdx.x;
  const int64_t first = int64_t(blockIdx.y) * groups_per_slice + warp;
  const int64_t end = min(dim / 32, int64_t(blockIdx.y + 1) * groups_per_slice);
  const float first_weight = first < end ? weight[first * 32 + lane] : 0.0f;  // never written: load before the wait
  cuda::wait_for_inputs();
  const float* xr = x + row * dim;
  float ss = 0.0f;
  for (int64_t i = int64_t(threadIdx.x) * 4; i < dim; i += kNormThreads * 4) {
    const float4 v = *reinterpret_cast<const float4*>(xr + i);
    ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
  }
  const float inv = rsqrtf(cuda::block_sum(ss, scratch) / float(dim) + eps);
  for (int64_t group = first; group < end; group += kNormGroups) {
    const int64_t i = group * 32 + lane;
    const float v = xr[i] * inv * (group == first ? first_weight : weight[i]);
    if (out) out[row * dim + i] = v;
    if (q8) cuda::quantize_q8_warp(v, q8 + row * dim + group * 32, q8_scales + row * (dim / 32) + group);
    if (super_blocks.q8) {  // the block's warps hold one super-block: groups group - warp ... + 7
      const int64_t at = row * dim + (group - warp) * 32;
      cuda::quantize_super_block(v, super_blocks.q8 + at, super_blocks.scales + at / cuda::kSuperBlockElems,
                                 super_blocks.sums + at / 16, super_block_max[(group / kNormGroups) % 2]);
    }
  }
}

// PRECOND: head_dim % 8 == 0; rope_pairs <= head_dim / 2; positions < context.
// One thread per (token, head slot, pair); head slots are q heads, k heads,
// then v heads (copied). Bytes moved: qkv read once, q rewritten, k and v
// written to the cache as f16.
__global__ void rope_kv_kernel(RopeKvParams p) {
  NT_TRACE_BLOCK(kRope);
  cuda::allow_dependents();
  cuda::wait_for_inputs();
  const int pairs = p.head_dim / 2;
  const int slots = p.n_heads + 2 * p.n_kv_heads;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= p.n_tokens * slots * pairs) return;
  const int pair = int(i % pairs);
  const int slot = int(i / pairs % slots);
  const int64_t t = i / (int64_t(pairs) * slots);
  const int64_t position = p.token_pos ? int64_t(p.token_pos[t]) : int64_t(*p.pos) + t;
  const int64_t rotation = p.token_rope_pos ? int64_t(p.token_rope_pos[t]) : position;
  float* v = p.qkv + t * p.qkv_stride + int64_t(slot) * p.head_dim + 2 * pair;
  float x0 = v[0], x1 = v[1];
  const bool is_v = slot >= p.n_heads + p.n_kv_heads;
  if (!is_v && pair < p.rope_pairs) {
    float s, c;
    sincosf(float(rotation) * p.inv_freq[pair], &s, &c);
    const float2 r = cuda::rope_rotate(x0, x1, c, s);
    x0 = r.x;
    x1 = r.y;
  }
  if (slot < p.n_heads) {
    v[0] = x0;
    v[1] = x1;
    return;
  }
  const int kv_head = is_v ? slot - p.n_heads - p.n_kv_heads : slot - p.n_heads;
  KvPaging paging = p.paging;
  if (p.token_row) paging.pages += int64_t(p.token_row[t]) * p.table_width;
  uint16_t* cache = is_v ? p.v_cache + paged_v_index(paging, kv_head, position, 2 * pair, p.context, p.head_dim)
                         : p.k_cache + paged_k_index(paging, kv_head, position, 2 * pair, p.context, p.head_dim);
  *reinterpret_cast<uint32_t*>(cache) = uint32_t(cuda::float_to_half(x0)) | uint32_t(cuda::float_to_half(x1)) << 16;
}

// PRECOND: none. Bytes moved: 8 read + 4 written per element.
__global__ void swiglu_kernel(const float* gate, const float* up, int64_t n, float* h) {
  cuda::allow_dependents();
  cuda::wait_for_inputs();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) h[i] = cuda::silu(gate[i]) * up[i];
}

constexpr int kArgmaxThreads = 256;
static_assert(kArgmaxChunk == 16 * kArgmaxThreads, "a first-pass block scans 16 elements a thread");

struct ArgmaxCandidate {
  float value;
  int32_t index;  // -1: none beat -inf
};
static_assert(sizeof(ArgmaxCandidate) == kArgmaxCandidateBytes, "the host plans the argmax scratch");

// Whether (v, i) beats (w, j) under argmax_first's rule: larger, or equal and earlier.
__device__ __forceinline__ bool beats(float v, int32_t i, float w, int32_t j) {
  return i >= 0 && (j < 0 || v > w || (v == w && i < j));
}

// The block's best (value, index) over its threads' candidates; every thread gets it.
__device__ ArgmaxCandidate block_argmax(ArgmaxCandidate c) {
  __shared__ ArgmaxCandidate best[32];
  for (int o = 16; o > 0; o >>= 1) {
    const float v = __shfl_xor_sync(0xffffffffu, c.value, o);
    const int32_t i = __shfl_xor_sync(0xffffffffu, c.index, o);
    if (beats(v, i, c.value, c.index)) c = {v, i};
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) best[warp] = c;
  __syncthreads();
  c = best[0];
  for (int w = 1; w < int(blockDim.x / 32); ++w) {
    if (beats(best[w].value, best[w].index, c.value, c.index)) c = best[w];
  }
  return c;
}

// First pass, grid (chunk, row): the best of x[row][chunk * kArgmaxChunk, ...)
// into partial[row][chunk]. A thread's strided walk meets its smallest index
// first, so `>` keeps the first of equal values. Bytes moved: the rows once.
__global__ void __launch_bounds__(kArgmaxThreads) argmax_chunks_kernel(const float* x, int64_t n, ArgmaxCandidate* partial) {
  cuda::allow_dependents();
  cuda::wait_for_inputs();
  const float* xr = x + int64_t(blockIdx.y) * n;
  const int64_t begin = int64_t(blockIdx.x) * kArgmaxChunk, end = min(n, begin + kArgmaxChunk);
  ArgmaxCandidate c{-INFINITY, -1};
  for (int64_t i = begin + threadIdx.x; i < end; i += kArgmaxThreads) {
    if (xr[i] > c.value) c = {xr[i], int32_t(i)};
  }
  c = block_argmax(c);
  if (threadIdx.x == 0) partial[int64_t(blockIdx.y) * gridDim.x + blockIdx.x] = c;
}

// Second pass, one block per row: the best of the row's chunk winners, into
// out or (one row) through `advance`.
__global__ void __launch_bounds__(kArgmaxThreads) argmax_winners_kernel(const ArgmaxCandidate* partial, int chunks, int32_t* out,
                                                                         StepAdvance advance) {
  cuda::allow_dependents();
  cuda::wait_for_inputs();
  ArgmaxCandidate c{-INFINITY, -1};
  for (int k = threadIdx.x; k < chunks; k += kArgmaxThreads) {
    const ArgmaxCandidate p = partial[int64_t(blockIdx.x) * chunks + k];
    if (beats(p.value, p.index, c.value, c.index)) c = p;
  }
  c = block_argmax(c);
  if (threadIdx.x != 0) return;
  const int32_t pick = c.index < 0 ? 0 : c.index;
  if (out) out[blockIdx.x] = pick;
  if (advance.pos) {
    const int32_t pos = *advance.pos;
    *advance.token = pick;
    advance.host_picks[pos % advance.ring_size] = pick;
    *advance.pos = pos + 1;
  }
}


void launch_argmax(const float* x, int64_t n_rows, int64_t n, int32_t* out, void* scratch, const StepAdvance& advance,
                   cudaStream_t stream) {
  if (n <= 0) fail("argmax over an empty row");
  if (n > std::numeric_limits<int32_t>::max()) fail("argmax over {} elements: indices are 32-bit", n);
  if (n_rows == 0) return;
  const int64_t chunks = ceil_div(n, kArgmaxChunk);
  if (n_rows > 65535) fail("argmax over {} rows exceeds the grid", n_rows);
  auto* partial = static_cast<ArgmaxCandidate*>(scratch);
  cuda::launch_kernel(argmax_chunks_kernel, dim3(unsigned(chunks), unsigned(n_rows)), dim3(kArgmaxThreads), 0, stream, x, n, partial);
  NT_CUDA_CHECK_LAUNCH();
  cuda::launch_kernel(argmax_winners_kernel, dim3(unsigned(n_rows)), dim3(kArgmaxThreads), 0, stream, partial, int(chunks), out,
                      advance);
  NT_CUDA_CHECK_LAUNCH();
}

void launch_rms_norm(const float* x, const float* weight, int64_t n_rows, int64_t dim, float eps, float* out, int8_t* q8,
                     float2* q8_scales, const NormSuperBlocks& super_blocks, cudaStream_t stream) {
  if (dim % 32 != 0) fail("rms_norm needs a multiple of 32 elements per row, got {}", dim);
  if (reinterpret_cast<uintptr_t>(x) % 16 != 0) fail("rms_norm reads its rows 16 bytes at a time: x must be 16-byte aligned");
  if (n_rows == 0) return;
  // Up to ~1024 blocks: one group per warp for a few rows, whole rows per block for many.
  const int64_t groups = dim / 32;
  const int64_t slices = std::clamp<int64_t>(1024 / n_rows, 1, ceil_div(groups, kNormGroups));
  int64_t groups_per_slice = ceil_div(groups, slices);
  if (super_blocks.q8) groups_per_slice = align_up(groups_per_slice, kNormGroups);
  cuda::launch_kernel(rms_norm_kernel, dim3(unsigned(n_rows), unsigned(ceil_div(groups, groups_per_slice))),
                      dim3(kNormThreads), 0, stream, x, weight, dim, eps, out, q8, q8_scales, super_blocks, groups_per_slice);
  NT_CUDA_CHECK_LAUNCH();
}

}  // namespace

void rms_norm(const float* x, const float* weight, int64_t n_rows, int64_t dim, float eps, float* out, int8_t* q8,
              float2* q8_scales, cudaStream_t stream) {
  launch_rms_norm(x, weight, n_rows, dim, eps, out, q8, q8_scales, {}, stream);
}

void rms_norm_super_blocks(const float* x, const float* weight, int64_t n_rows, int64_t dim, float eps,
                           const NormSuperBlocks& out, cudaStream_t stream) {
  static_assert(kNormThreads == cuda::kSuperBlockElems, "a block's threads quantize one super-block a pass");
  if (dim % cuda::kSuperBlockElems != 0) {
    fail("super-block activations need a multiple of {} elements per row, got {}", cuda::kSuperBlockElems, dim);
  }
  if (!out.q8 || !out.scales || !out.sums) fail("rms_norm_super_blocks needs its codes, scales and sums");
  launch_rms_norm(x, weight, n_rows, dim, eps, nullptr, nullptr, nullptr, out, stream);
}

void rope_and_store_kv(const RopeKvParams& p, cudaStream_t stream) {
  if (p.head_dim % 8 != 0 || p.rope_pairs > p.head_dim / 2 || (!p.paging.pages && p.context % kKvTile != 0)) {
    fail("rope: head_dim {} must be a multiple of 8 holding {} rotated pairs, an unpaged cache's context {} a multiple of {}",
         p.head_dim, p.rope_pairs, p.context, kKvTile);
  }
  if (p.token_row && (!p.paging.pages || !p.token_pos || p.table_width <= 0)) {
    fail("rope: tokens of many sequences need their positions and a block table (table_width {})", p.table_width);
  }
  const int64_t n = p.n_tokens * (p.n_heads + 2 * p.n_kv_heads) * (p.head_dim / 2);
  if (n == 0) return;
  cuda::launch_kernel(rope_kv_kernel, dim3(cuda::blocks_for(n, 256)), dim3(256), 0, stream, p);
  NT_CUDA_CHECK_LAUNCH();
}

__global__ void copy_floats_kernel(const float* from, float* to, int64_t n) {
  cuda::allow_dependents();
  cuda::wait_for_inputs();  // a programmatic launch may start before the kernel that writes `from` ends
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) to[i] = from[i];
}

void copy_floats(const float* from, float* to, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  cuda::launch_kernel(copy_floats_kernel, dim3(cuda::blocks_for(n, 256)), dim3(256), 0, stream, from, to, n);
  NT_CUDA_CHECK_LAUNCH();
}

__global__ void add_floats_kernel(const float* x, float* y, int64_t n) {
  cuda::allow_dependents();
  cuda::wait_for_inputs();
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) y[i] += x[i];
}

void add_floats(const float* x, float* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  cuda::launch_kernel(add_floats_kernel, dim3(cuda::blocks_for(n, 256)), dim3(256), 0, stream, x, y, n);
  NT_CUDA_CHECK_LAUNCH();
}

void swiglu(const float* gate, const float* up, int64_t n, float* h, cudaStream_t stream) {
  if (n == 0) return;
  cuda::launch_kernel(swiglu_kernel, dim3(cuda::blocks_for(n, 256)), dim3(256), 0, stream, gate, up, n, h);
  NT_CUDA_CHECK_LAUNCH();
}

void argmax_rows(const float* x, int64_t n_rows, int64_t n, int32_t* out, void* scratch, cudaStream_t stream) {
  launch_argmax(x, n_rows, n, out, scratch, StepAdvance{}, stream);
}

void argmax_and_advance(const float* logits, int64_t n, void* scratch, const StepAdvance& advance, cudaStream_t stream) {
  if (!advance.token || !advance.pos || !advance.host_picks || advance.ring_size <= 0) {
    fail("argmax_and_advance needs the token, the position and a ring of host picks");
  }
  launch_argmax(logits, 1, n, nullptr, scratch, advance, stream);
}

}  // namespace nt

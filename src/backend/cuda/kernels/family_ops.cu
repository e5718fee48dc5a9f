#include "backend/cuda/kernels/family_ops.h"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels/device_util.cuh"
#include "backend/cuda/kernels/kv_layout.h"
#include "backend/cuda/kernels/launch.cuh"

namespace nt {
namespace {

constexpr int kPrepWarps = 4;  // (token, head) items a block

// PRECOND: rope_pairs <= head_dim / 2; positions < context. Warp w of block
// b takes item b * kPrepWarps + w: token item / slots, head slot item % slots
// (q heads, k heads, then v heads). The head goes through shared memory, so
// each lane rotates its elements against their partners whatever the style.
// Bytes moved: the head read once, q rewritten, k and v written to the cache as f16.
__global__ void prepare_qkv_kernel(RopeKvParams p, QkvPrep prep) {
  extern __shared__ float heads_s[];  // [kPrepWarps][head_dim]
  cuda::allow_dependents();
  cuda::wait_for_inputs();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int slots = p.n_heads + 2 * p.n_kv_heads, hd = p.head_dim;
  const int64_t item = int64_t(blockIdx.x) * kPrepWarps + warp;
  if (item >= p.n_tokens * slots) return;
  const int slot = int(item % slots);
  const int64_t t = item / slots;
  const bool is_q = slot < p.n_heads, is_v = slot >= p.n_heads + p.n_kv_heads;
  const int kv_head = is_v ? slot - p.n_heads - p.n_kv_heads : slot - p.n_heads;
  float* x = p.qkv + t * p.qkv_stride + int64_t(slot) * hd;
  const float* bias = is_q ? prep.q_bias : is_v ? prep.v_bias : prep.k_bias;
  const float* bias_head = bias ? bias + int64_t(is_q ? slot : kv_head) * hd : nullptr;
  float* head = heads_s + warp * hd;
  float ss = 0.0f;
  for (int d = lane; d < hd; d += 32) {
    const float v = bias_head ? x[d] + bias_head[d] : x[d];
    head[d] = v;
    ss += v * v;
  }
  const float* norm = is_q ? prep.q_norm : is_v ? nullptr : prep.k_norm;
  if (norm) {
    const float inv = rsqrtf(cuda::warp_sum(ss) / float(hd) + prep.eps);
    for (int d = lane; d < hd; d += 32) head[d] = head[d] * inv * norm[d];
  }
  __syncwarp();
  const int64_t position = p.token_pos ? int64_t(p.token_pos[t]) : int64_t(*p.pos) + t;
  const int64_t rotation = p.token_rope_pos ? int64_t(p.token_rope_pos[t]) : position;
  KvPaging paging = p.paging;
  if (p.token_row) paging.pages += int64_t(p.token_row[t]) * p.table_width;
  const int pairs = p.rope_pairs;
  for (int d = lane; d < hd; d += 32) {
    float out = head[d];
    if (!is_v && d < 2 * pairs) {
      const bool first = prep.halves ? d < pairs : (d & 1) == 0;
      const int pair = prep.halves ? (first ? d : d - pairs) : d / 2;
      const int partner = prep.halves ? (first ? d + pairs : d - pairs) : d ^ 1;
      float s, c;
      sincosf(float(rotation) * p.inv_freq[pair], &s, &c);
      s *= prep.magnitude;
      c *= prep.magnitude;
      const float2 r = first ? cuda::rope_rotate(out, head[partner], c, s) : cuda::rope_rotate(head[partner], out, c, s);
      out = first ? r.x : r.y;
    }
    if (is_q) {
      x[d] = out;
    } else if (is_v) {
      p.v_cache[paged_v_index(paging, kv_head, position, d, p.context, hd)] = cuda::float_to_half(out);
    } else {
      p.k_cache[paged_k_index(paging, kv_head, position, d, p.context, hd)] = cuda::float_to_half(out);
    }
  }
}

constexpr int kNormThreads = 256;

// One block per row. Bytes moved: y read twice (L1/L2 the second time), x read and written once.
__global__ void __launch_bounds__(kNormThreads) add_normed_kernel(const float* y, const float* weight, int64_t dim, float eps, float* x) {
  __shared__ float scratch[32];
  cuda::allow_dependents();
  cuda::wait_for_inputs();
  const float* yr = y + int64_t(blockIdx.x) * dim;
  float* xr = x + int64_t(blockIdx.x) * dim;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < dim; i += kNormThreads) ss += yr[i] * yr[i];
  const float inv = rsqrtf(cuda::block_sum(ss, scratch) / float(dim) + eps);
  for (int64_t i = threadIdx.x; i < dim; i += kNormThreads) xr[i] += yr[i] * inv * weight[i];
}

__global__ void geglu_kernel(const float* gate, const float* up, int64_t n, float* h) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  cuda::allow_dependents();
  cuda::wait_for_inputs();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float g = gate[i];
  h[i] = 0.5f * g * (1.0f + tanhf(kSqrt2OverPi * (g + 0.044715f * g * g * g))) * up[i];
}

__global__ void swiglu_oai_kernel(const float* gate, const float* up, int64_t n, float* h) {
  // gpt-oss's constants, which its files do not carry (as on the CPU).
  constexpr float kAlpha = 1.702f, kLimit = 7.0f;
  cuda::allow_dependents();
  cuda::wait_for_inputs();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float g = fminf(gate[i], kLimit);
  const float u = fminf(fmaxf(up[i], -kLimit), kLimit);
  h[i] = g / (1.0f + expf(-kAlpha * g)) * (u + 1.0f);
}

__global__ void add_bias_rows_kernel(float* rows, const float* bias, int64_t n, int64_t width) {
  cuda::allow_dependents();
  cuda::wait_for_inputs();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n * width) rows[i] += bias[i % width];
}

__global__ void scale_floats_kernel(float* x, int64_t n, float scale) {
  cuda::allow_dependents();
  cuda::wait_for_inputs();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= scale;
}

__global__ void soft_cap_kernel(float* x, int64_t n, float cap) {
  cuda::allow_dependents();
  cuda::wait_for_inputs();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = cap * tanhf(x[i] / cap);
}

}  // namespace

void prepare_qkv_and_store(const RopeKvParams& p, const QkvPrep& prep, cudaStream_t stream) {
  if (p.head_dim % 8 != 0 || p.rope_pairs > p.head_dim / 2 || (!p.paging.pages && p.context % kKvTile != 0)) {
    fail("qkv: head_dim {} must be a multiple of 8 holding {} rotated pairs, an unpaged cache's context {} a multiple of {}",
         p.head_dim, p.rope_pairs, p.context, kKvTile);
  }
  if (p.token_row && (!p.paging.pages || !p.token_pos || p.table_width <= 0)) {
    fail("qkv: tokens of many sequences need their positions and a block table (table_width {})", p.table_width);
  }
  if (bool(prep.q_bias) != bool(prep.k_bias) || bool(prep.q_bias) != bool(prep.v_bias) || bool(prep.q_norm) != bool(prep.k_norm)) {
    fail("qkv: the Q, K and V biases come together, and so do the Q and K norms");
  }
  const int64_t items = p.n_tokens * (p.n_heads + 2 * p.n_kv_heads);
  if (items == 0) return;
  const size_t smem = sizeof(float) * size_t(kPrepWarps) * size_t(p.head_dim);
  cuda::launch_kernel(prepare_qkv_kernel, dim3(cuda::blocks_for(items, kPrepWarps)), dim3(kPrepWarps * 32), smem, stream, p, prep);
  NT_CUDA_CHECK_LAUNCH();
}

void add_normed(const float* y, const float* weight, int64_t n_rows, int64_t dim, float eps, float* x, cudaStream_t stream) {
  if (n_rows == 0) return;
  cuda::launch_kernel(add_normed_kernel, dim3(unsigned(n_rows)), dim3(kNormThreads), 0, stream, y, weight, dim, eps, x);
  NT_CUDA_CHECK_LAUNCH();
}

void geglu(const float* gate, const float* up, int64_t n, float* h, cudaStream_t stream) {
  if (n == 0) return;
  cuda::launch_kernel(geglu_kernel, dim3(cuda::blocks_for(n, 256)), dim3(256), 0, stream, gate, up, n, h);
  NT_CUDA_CHECK_LAUNCH();
}

void swiglu_oai(const float* gate, const float* up, int64_t n, float* h, cudaStream_t stream) {
  if (n == 0) return;
  cuda::launch_kernel(swiglu_oai_kernel, dim3(cuda::blocks_for(n, 256)), dim3(256), 0, stream, gate, up, n, h);
  NT_CUDA_CHECK_LAUNCH();
}

void add_bias_rows(float* rows, const float* bias, int64_t n, int64_t width, cudaStream_t stream) {
  if (n * width == 0) return;
  cuda::launch_kernel(add_bias_rows_kernel, dim3(cuda::blocks_for(n * width, 256)), dim3(256), 0, stream, rows, bias, n, width);
  NT_CUDA_CHECK_LAUNCH();
}

void scale_floats(float* x, int64_t n, float scale, cudaStream_t stream) {
  if (n == 0) return;
  cuda::launch_kernel(scale_floats_kernel, dim3(cuda::blocks_for(n, 256)), dim3(256), 0, stream, x, n, scale);
  NT_CUDA_CHECK_LAUNCH();
}

void soft_cap(float* x, int64_t n, float cap, cudaStream_t stream) {
  if (n == 0) return;
  if (!(cap > 0.0f)) fail("soft_cap: the cap must be positive, got {}", cap);
  cuda::launch_kernel(soft_cap_kernel, dim3(cuda::blocks_for(n, 256)), dim3(256), 0, stream, x, n, cap);
  NT_CUDA_CHECK_LAUNCH();
}

}  // namespace nt

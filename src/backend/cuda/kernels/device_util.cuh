// Small device helpers shared by the kernels: vector loads, half/bf16
// conversion, warp and block reductions.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace nt::cuda {

// Weights are read once per pass: bypass L1 so activations keep it.
__device__ __forceinline__ uint4 load_stream16(const void* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

__device__ __forceinline__ uint2 load_stream8(const void* p) {
  uint2 v;
  asm("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}

// Through L1, for a lane that reads 32 contiguous bytes as two 16-byte loads:
// the second half of each sector then comes from L1 instead of L2.
__device__ __forceinline__ uint4 load_l1_16(const void* p) { return __ldg(static_cast<const uint4*>(p)); }

__device__ __forceinline__ int4 load_int4(const void* p) { return __ldg(static_cast<const int4*>(p)); }

__device__ __forceinline__ float half_to_float(uint16_t bits) { return __half2float(__ushort_as_half(bits)); }
__device__ __forceinline__ float bf16_to_float(uint16_t bits) { return __uint_as_float(uint32_t(bits) << 16); }
__device__ __forceinline__ uint16_t float_to_half(float v) { return __half_as_ushort(__float2half_rn(v)); }

// RoPE of the pair (x0, x1) by the angle whose cosine and sine are c and s.
// The RoPE kernel and the attention launches that fold RoPE in must round
// alike, or a key cached by one path differs in its last bit from the same
// key cached by the other (a stepwise verification run against one-token
// steps, runtime/batch.h): each product and sum is rounded on its own, as
// nvcc's FMA contraction, chosen per kernel, would not guarantee.
__device__ __forceinline__ float2 rope_rotate(float x0, float x1, float c, float s) {
  return make_float2(__fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s)), __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c)));
}

// Byte k (0..15) of a 16-byte vector, for a k known only at run time
// (selects words instead of indexing, which would spill to local memory).
__device__ __forceinline__ int byte_at(const uint4& v, int k) {
  const uint32_t w = k < 8 ? (k < 4 ? v.x : v.y) : (k < 12 ? v.z : v.w);
  return int((w >> (8 * (k & 3))) & 0xff);
}

__device__ __forceinline__ int word_at(const uint4& v, int k) {
  return int(k == 0 ? v.x : k == 1 ? v.y : k == 2 ? v.z : v.w);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ __forceinline__ int warp_sum_int(int v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum over the whole block; every thread gets the result. `scratch` holds 32 floats.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read from a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < n_warps ? scratch[lane] : 0.0f;
  return warp_sum(v);
}

__device__ __forceinline__ float silu(float x) { return x / (1.0f + __expf(-x)); }

// Quantizes 32 consecutive activations held one per lane into the q8 format
// the quantized mat-vecs read: d = max|x| / 127, q = round(x / d), and the
// pair (d, d * sum q). Every lane of the warp must call it.
__device__ __forceinline__ void quantize_q8_warp(float v, int8_t* q_out, float2* ds_out) {
  const int lane = threadIdx.x & 31;
  const float amax = warp_max(fabsf(v));
  const float d = amax / 127.0f;
  const float inv = d > 0.0f ? 1.0f / d : 0.0f;
  const int q = __float2int_rn(v * inv);
  q_out[lane] = int8_t(q);
  const int sum = warp_sum_int(q);
  if (lane == 0) *ds_out = make_float2(d, d * float(sum));
}

// Threads of a block that quantize one 256-element super-block together.
constexpr int kSuperBlockElems = 256;

// Quantizes a 256-element super-block held one element per thread by the
// first 256 threads (threadIdx.x is the element's index in it) into the
// super-block activations the int8 GEMM's K-quant tiles read, the CPU's Q8_K
// rounding: d = max|x| / 127 in *scale_out, q = round-to-even(x * (1 / d))
// in q_out[threadIdx.x], and the codes' sums per 16 elements as f16 bits in
// sums_out. `warp_max_scratch` holds 8 floats no other thread writes until
// every thread has returned (a caller looping alternates two of them).
__device__ __forceinline__ void quantize_super_block(float v, int8_t* q_out, float* scale_out, uint16_t* sums_out,
                                                     float* warp_max_scratch) {
  const float m = warp_max(fabsf(v));
  if (threadIdx.x % 32 == 0) warp_max_scratch[threadIdx.x / 32] = m;
  __syncthreads();
  float amax = warp_max_scratch[0];
#pragma unroll
  for (int w = 1; w < kSuperBlockElems / 32; ++w) amax = fmaxf(amax, warp_max_scratch[w]);
  const float d = amax / 127.0f;
  const float inv = d > 0.0f ? 1.0f / d : 0.0f;
  const int q = __float2int_rn(v * inv);
  q_out[threadIdx.x] = int8_t(q);
  int sum = q;
#pragma unroll
  for (int offset = 8; offset >= 1; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);  // within 16 lanes
  if (threadIdx.x % 16 == 0) sums_out[threadIdx.x / 16] = float_to_half(float(sum));
  if (threadIdx.x == 0) *scale_out = d;
}

}  // namespace nt::cuda

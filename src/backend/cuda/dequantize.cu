#include "backend/cuda/dequantize.h"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/weight_formats.cuh"

namespace nt {
namespace {

// PRECOND: cols % 32 == 0. One thread per 32-element chunk; bytes moved: the
// rows once in their format, 64 bytes of f16 written per chunk.
template <class F>
__global__ void dequantize_f16_kernel(DeviceMatrix m, int64_t first_row, int64_t n_chunks, uint16_t* out) {
  cuda::allow_dependents();
  cuda::wait_for_inputs();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n_chunks) return;
  const int64_t chunks_per_row = m.cols / 32;
  float v[32];
  F::dequant32(m, first_row + i / chunks_per_row, i % chunks_per_row, v);
  uint4* dst = reinterpret_cast<uint4*>(out + i * 32);
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    uint32_t w[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      w[j] = uint32_t(cuda::float_to_half(v[8 * k + 2 * j])) | uint32_t(cuda::float_to_half(v[8 * k + 2 * j + 1])) << 16;
    }
    dst[k] = make_uint4(w[0], w[1], w[2], w[3]);
  }
}

// PRECOND: ids[t] < m.rows. One thread per 32-element chunk of an output row;
// bytes moved: n_ids rows in their format, 4 bytes per element written.
template <class F>
__global__ void gather_f32_kernel(DeviceMatrix m, const int32_t* ids, int64_t n_chunks, float* out) {
  cuda::allow_dependents();
  cuda::wait_for_inputs();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n_chunks) return;
  const int64_t chunks_per_row = m.cols / 32;
  float v[32];
  F::dequant32(m, ids[i / chunks_per_row], i % chunks_per_row, v);
  float4* dst = reinterpret_cast<float4*>(out + i * 32);
#pragma unroll
  for (int k = 0; k < 8; ++k) dst[k] = make_float4(v[4 * k], v[4 * k + 1], v[4 * k + 2], v[4 * k + 3]);
}

unsigned grid_for(int64_t n, int threads) { return unsigned((n + threads - 1) / threads); }

}  // namespace

void dequantize_rows_f16(const DeviceMatrix& m, int64_t first_row, int64_t n_rows, uint16_t* out, cudaStream_t stream) {
  const int64_t n_chunks = n_rows * (m.cols / 32);
  if (n_chunks == 0) return;
  cuda::dispatch_format(m.type, [&](auto format) {
    using F = decltype(format);
    cuda::launch_kernel(dequantize_f16_kernel<F>, dim3(grid_for(n_chunks, 128)), dim3(128), 0, stream, m, first_row, n_chunks, out);
  });
  NT_CUDA_CHECK_LAUNCH();
}

void gather_rows_f32(const DeviceMatrix& m, const int32_t* ids, int64_t n_ids, float* out, cudaStream_t stream) {
  const int64_t n_chunks = n_ids * (m.cols / 32);
  if (n_chunks == 0) return;
  cuda::dispatch_format(m.type, [&](auto format) {
    using F = decltype(format);
    cuda::launch_kernel(gather_f32_kernel<F>, dim3(grid_for(n_chunks, 128)), dim3(128), 0, stream, m, ids, n_chunks, out);
  });
  NT_CUDA_CHECK_LAUNCH();
}

}  // namespace nt

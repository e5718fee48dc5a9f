#include "backend/cuda/kernels/gemm.h"

#include <cublas_v2.h>

#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels/dequantize.h"
#include "backend/cuda/kernels/device_util.cuh"
#include "backend/cuda/kernels/launch.cuh"

#define NT_CUBLAS_CHECK(expr)                                                                    \
  do {                                                                                           \
    const cublasStatus_t nt_status_ = (expr);                                                    \
    if (nt_status_ != CUBLAS_STATUS_SUCCESS) {                                                   \
      ::nt::fail("cuBLAS error {} in {} at {}:{}", cublasGetStatusName(nt_status_), #expr, __FILE__, __LINE__); \
    }                                                                                            \
  } while (0)

namespace nt {
namespace {

constexpr int64_t kRowAlign = 256;  // row blocks: a multiple of the GEMM tiles, y blocks 1 KiB aligned

// PRECOND: none. Bytes moved: 4 read + 2 written per element.
__global__ void convert_f16_kernel(const float* x, int64_t n, uint16_t* out) {
  cuda::allow_dependents();
  cuda::wait_for_inputs();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = cuda::float_to_half(x[i]);
}

}  // namespace

Gemm::Gemm(uint64_t scratch_bytes) : scratch_(scratch_bytes, "the GEMM f16 weight scratch") {
  cublasHandle_t handle = nullptr;
  NT_CUBLAS_CHECK(cublasCreate(&handle));
  handle_ = handle;
}

Gemm::~Gemm() {
  if (handle_) cublasDestroy(static_cast<cublasHandle_t>(handle_));
}

void Gemm::run(const DeviceMatrix& w, const uint16_t* x_f16, int64_t n_tokens, float* y, int64_t y_stride,
               bool accumulate, cudaStream_t stream) {
  if (n_tokens == 0 || w.rows == 0) return;
  auto handle = static_cast<cublasHandle_t>(handle_);
  NT_CUBLAS_CHECK(cublasSetStream(handle, stream));
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  // Row-major Y[T][rows] is column-major rows x T: Y = W(rows x cols) X^T.
  auto gemm = [&](const void* w_f16, int64_t rows, float* y_block) {
    NT_CUBLAS_CHECK(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, int(rows), int(n_tokens), int(w.cols), &alpha, w_f16,
                                 CUDA_R_16F, int(w.cols), x_f16, CUDA_R_16F, int(w.cols), &beta, y_block, CUDA_R_32F,
                                 int(y_stride), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  };
  if (w.type == TensorType::F16) {  // already in the GEMM's format
    gemm(w.plane[0], w.rows, y);
    return;
  }
  int64_t rows_per_block = int64_t(scratch_.size() / (uint64_t(w.cols) * 2));
  if (rows_per_block == 0) fail("GEMM scratch of {} bytes cannot hold one row of {} elements", scratch_.size(), w.cols);
  // Whole tiles: 8192x28672 in 256 MiB gave blocks of 4681 rows, the second
  // one's y only 4-byte aligned, and cuBLAS ran 5x slower (H200, 512 tokens).
  if (rows_per_block >= kRowAlign) rows_per_block -= rows_per_block % kRowAlign;
  for (int64_t r = 0; r < w.rows; r += rows_per_block) {
    const int64_t n = std::min(rows_per_block, w.rows - r);
    dequantize_rows_f16(w, r, n, scratch_.as<uint16_t>(), stream);
    gemm(scratch_.get(), n, y + r);
  }
}

void convert_f32_to_f16(const float* x, int64_t n, uint16_t* out, cudaStream_t stream) {
  if (n == 0) return;
  cuda::launch_kernel(convert_f16_kernel, dim3(cuda::blocks_for(n, 256)), dim3(256), 0, stream, x, n, out);
  NT_CUDA_CHECK_LAUNCH();
}

}  // namespace nt

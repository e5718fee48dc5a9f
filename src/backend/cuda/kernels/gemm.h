// Prefill mat-mat: Y = X W^T for many tokens through cuBLAS's f16 tensor-core
// GEMM (f32 accumulation), on an f16 copy of W decoded into a scratch buffer
// in row blocks, so any format and any matrix size fits a fixed scratch.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/device_buffer.h"
#include "backend/cuda/weights/device_matrix.h"

namespace nt {

class Gemm {
 public:
  // scratch_bytes bounds the f16 weight rows decoded at once (at least one row).
  explicit Gemm(uint64_t scratch_bytes);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // y[t * y_stride + r] = (accumulate ? y[..] : 0) + sum_i W[r][i] x[t][i],
  // for t < n_tokens and every row r; x is f16 [n_tokens][cols].
  void run(const DeviceMatrix& w, const uint16_t* x_f16, int64_t n_tokens, float* y, int64_t y_stride,
           bool accumulate, cudaStream_t stream);

  // The f16 scratch, free between runs on the stream: the int8 GEMM keeps
  // its split-K partial sums there (quantized_gemm.h).
  DeviceBuffer& scratch() { return scratch_; }

 private:
  void* handle_ = nullptr;  // cublasHandle_t
  DeviceBuffer scratch_;
};

// out[i] = half(x[i]) for i < n.
void convert_f32_to_f16(const float* x, int64_t n, uint16_t* out, cudaStream_t stream);

}  // namespace nt

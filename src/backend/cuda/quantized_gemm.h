// Mat-mul of a few to a few dozen tokens with quantized weights on the int8
// tensor cores: Y = X W^T, reading the weights' codes in place (no f16 copy)
// and the activations as q8 (quantize_activations). Each 32-element block of
// a row times a token's q8 block is one integer mma; the block scales apply
// in the epilogue of that mma. Decode batches of 6-64 sequences read every
// weight once instead of once per 8 tokens (the mat-vec) or twice plus an f16
// write (the dequantize + cuBLAS GEMM).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/device_matrix.h"
#include "backend/cuda/matvec.h"

namespace nt {

// Whether quantized_gemm takes matrices of `type` with rows of `cols` elements.
bool quantized_gemm_supported(TensorType type, int64_t cols);

struct QuantizedGemmParams {
  DeviceMatrix w;                     // rows x cols
  Activations x;                      // q8 and q8_scales of n_tokens rows of cols
  int64_t n_tokens = 0;
  float* y = nullptr;                 // token t, row r at y[t * y_stride + r]
  int64_t y_stride = 0;
  bool accumulate = false;            // y += X W^T instead of y = X W^T
  // Split-K partial sums, when a matrix has too few rows to fill the GPU;
  // fewer splits are used when they do not fit.
  float* scratch = nullptr;
  uint64_t scratch_bytes = 0;
  int multiprocessors = 0;            // of the GPU it runs on: how many blocks fill it
  // The gated form (w_up set, as the FFN's gate and up): h = silu(X W^T) *
  // (X W_up^T) as q8 activations (quantize_activations' format) in y_q8 and
  // y_q8_scales, and in y when y is set; one launch for both matrices.
  // Needs 2 x n_tokens x rows floats of scratch.
  DeviceMatrix w_up;
  int8_t* y_q8 = nullptr;
  float2* y_q8_scales = nullptr;
};

void quantized_gemm(const QuantizedGemmParams& p, cudaStream_t stream);

}  // namespace nt

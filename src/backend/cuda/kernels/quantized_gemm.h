// Mat-mul of a few to a few dozen tokens with quantized weights on the int8
// tensor cores: Y = X W^T, reading the weights' codes in place (no f16 copy)
// and the activations as q8 (quantize_activations). Each 32-element block of
// a row times a token's q8 block is one integer mma; the block scales apply
// in the epilogue of that mma. Decode batches of a few
// (quantized_gemm_min_tokens) to 64 sequences read every weight once instead
// of once per 8 tokens (the mat-vec) or twice plus an f16 write (the
// dequantize + cuBLAS GEMM).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/kernels/matvec.h"
#include "backend/cuda/weights/device_matrix.h"

namespace nt {

// Whether quantized_gemm takes matrices of `type` with rows of `cols` elements.
bool quantized_gemm_supported(TensorType type, int64_t cols);

// The fewest tokens of a decode batch for which quantized_gemm beats the
// 8-column mat-vec on matrices of `type` (measured on an H100, llama3-8b and
// -1b shapes, docs/PERFORMANCE.md "Where the int8 GEMM starts"): 4 for the
// K-quants (Q4_K and Q5_K batches of up to 4 take the narrow form); 6 for
// Q4_0 and Q4_1 and 8 for Q8_0, whose per-32 scales cost the staged form a
// float multiply-add per block and token.
int64_t quantized_gemm_min_tokens(TensorType type);

// Super-block activations for K-quant weights (Q4_K, Q5_K, Q6_K), the CPU's Q8_K
// rounding: int8 codes as in q8, one scale per 256 elements, and the codes'
// sums per 16 elements as f16 bits (exact: |sum| <= 16 * 127). One scale a
// super-block lets a step of 256 elements add its eight blocks' integer
// products, weighted by the weights' integer sub-block scales, in int32 and
// convert once, where per-32 scales cost a float multiply-add per block; the
// Q4_K mins meet the 16-element sums in one f16 mma a step.
struct SuperBlockActivations {
  const int8_t* q8 = nullptr;      // [tokens][cols]
  const float* scales = nullptr;   // [tokens][cols / 256]
  const uint16_t* sums = nullptr;  // [tokens][cols / 16]
};

// Whether quantized_gemm multiplies matrices of `type` by super-block activations.
bool quantized_gemm_takes_super_blocks(TensorType type);

// Quantizes `tokens` rows of `cols` floats (cols % 256 == 0) into `out`'s
// buffers: d = max|x| / 127 per 256 elements, q = round(x / d).
void quantize_super_blocks(const float* x, int64_t tokens, int64_t cols, int8_t* q8, float* scales, uint16_t* sums,
                           cudaStream_t stream);

struct QuantizedGemmParams {
  DeviceMatrix w;                     // rows x cols
  Activations x;                      // q8 and q8_scales of n_tokens rows of cols
  // When set (q8), K-quant weights multiply these instead of x's q8 (the
  // other formats take x). The gated form's output is q8 as ever.
  SuperBlockActivations xs;
  int64_t n_tokens = 0;
  float* y = nullptr;                 // token t, row r at y[t * y_stride + r]
  int64_t y_stride = 0;
  bool accumulate = false;            // y += X W^T instead of y = X W^T
  // Split-K partial sums, when a matrix has too few rows to fill the GPU;
  // fewer splits are used when they do not fit.
  float* scratch = nullptr;
  uint64_t scratch_bytes = 0;
  int multiprocessors = 0;            // of the GPU it runs on: how many blocks fill it
  // Tokens of the widest tile: 64, or 32 (inputs of more tokens take several
  // tiles, each rereading the weights: fewer registers and more blocks a
  // multiprocessor, for the A/B against 64-token tiles).
  int widest_tile = 64;
  // The gated form (w_up set, as the FFN's gate and up): h = silu(X W^T) *
  // (X W_up^T) as q8 activations (quantize_activations' format) in y_q8 and
  // y_q8_scales when they are set, and in y when y is; one launch for both
  // matrices. Needs 2 x n_tokens x rows floats of scratch.
  DeviceMatrix w_up;
  int8_t* y_q8 = nullptr;
  float2* y_q8_scales = nullptr;
};

// Q4_K and Q5_K weights times super-block activations of up to 4 tokens (decode
// batches of a few sequences), when no q8 output is asked for, take a narrow
// form: one launch whose blocks each sum whole rows (no split-K scratch).
void quantized_gemm(const QuantizedGemmParams& p, cudaStream_t stream);

}  // namespace nt

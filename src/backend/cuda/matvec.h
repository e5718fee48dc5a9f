// Decode mat-vec: y = W x for 1 to 8 activation columns, reading every weight
// once per call, for every weight format. Quantized formats take the
// activations as q8 (see quantize_activations); float formats take them as f32.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/device_matrix.h"

namespace nt {

constexpr int kMatvecMaxColumns = 8;

struct Activations {
  const float* f32 = nullptr;        // [columns][cols]
  const int8_t* q8 = nullptr;        // [columns][cols]
  const float2* q8_scales = nullptr; // [columns][cols / 32]: (d, d * sum q)
};

struct MatvecParams {
  DeviceMatrix w;                    // rows x cols
  DeviceMatrix w_up;                 // set for the gated form: y = silu(W x) * (W_up x)
  Activations x;
  float* y = nullptr;                // column c, row r at y[c * y_stride + r]
  int64_t y_stride = 0;
  const float* residual = nullptr;   // added to y in the epilogue (may be y itself)
};

// True when `type` takes q8 activations.
bool matvec_wants_q8(TensorType type);

void matvec(const MatvecParams& p, int columns, cudaStream_t stream);

// Quantizes `columns` rows of `cols` floats (cols a multiple of 32) to q8.
void quantize_activations(const float* x, int64_t columns, int64_t cols, int8_t* q8, float2* q8_scales,
                          cudaStream_t stream);

}  // namespace nt

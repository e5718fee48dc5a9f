// Whole rows of a device matrix decoded to f16 (the GEMM path's scratch copy)
// or f32 (embedding lookup).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/weights/device_matrix.h"

namespace nt {

// out[r - first_row][c] = W[r][c] as IEEE half, for r in [first_row, first_row + n_rows).
void dequantize_rows_f16(const DeviceMatrix& m, int64_t first_row, int64_t n_rows, uint16_t* out, cudaStream_t stream);

// out[t][c] = W[ids[t]][c] as float. ids live on the device and must be < m.rows.
void gather_rows_f32(const DeviceMatrix& m, const int32_t* ids, int64_t n_ids, float* out, cudaStream_t stream);

}  // namespace nt

// Weight matrices resident on the GPU. Each file block is split into up to
// four "planes" so that the codes of consecutive blocks are contiguous and
// 16-byte aligned: a warp's lanes then read consecutive 16-byte chunks (full
// sectors) and the scales come from small planes of their own. An 18-byte
// Q4_0 block becomes 16 bytes in the code plane and 2 in the scale plane.
// Plane p of a matrix holds rows*blocks_per_row records of plane_bytes[p]
// each, row after row. F32, F16 and BF16 keep the file layout.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "quant/tensor_type.h"
#include "runtime/device_layout.h"  // WeightLayout, device_matrix_bytes

namespace nt {

struct DeviceMatrix {
  TensorType type = TensorType::F32;
  int64_t rows = 0, cols = 0;
  uint8_t* plane[4] = {};

  int64_t blocks_per_row() const;
};

// Lays the planes out at `memory`, which must hold device_matrix_bytes.
DeviceMatrix place_device_matrix(TensorType type, int64_t rows, int64_t cols, void* memory);

// The same matrix `bytes` further on in device memory (another ring slot).
DeviceMatrix offset_device_matrix(const DeviceMatrix& m, uint64_t bytes);

// Copies rows [first_row, first_row + n_rows) from file-format host memory,
// re-laying each block into the planes on the GPU through `staging`
// (a device buffer of staging_bytes, at least one file row). Synchronous.
void upload_matrix_rows(const DeviceMatrix& m, int64_t first_row, int64_t n_rows, const void* host_rows,
                        void* staging, uint64_t staging_bytes);

// Re-lays rows [first_row, first_row + n_rows) from file-format bytes already
// in device memory (`device_rows`) into the planes, ordered on `stream` and
// without synchronizing: the streaming path, where the file bytes arrive by an
// asynchronous H2D copy on the same stream.
void relay_matrix_rows_async(const DeviceMatrix& m, int64_t first_row, int64_t n_rows, const void* device_rows,
                             cudaStream_t stream);

}  // namespace nt

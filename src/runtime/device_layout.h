// Device-layout sizes of weight matrices: how the CUDA backend lays each file
// block out in "planes" (device_matrix.h), as plain host arithmetic so that
// the memory plan sizes layers the same way with or without a GPU.
// Kept C++17 and free of CUDA headers: kernels include it too.
#pragma once

#include <cstdint>

#include "quant/tensor_type.h"

namespace nt {

// Rounds a byte count up to the 256-byte alignment cudaMalloc guarantees, so
// sub-allocations carved from one block keep vector loads aligned.
constexpr uint64_t align_device(uint64_t bytes) { return (bytes + 255) / 256 * 256; }

struct WeightLayout {
  struct Segment {
    int src, len, plane, dst;  // copy len bytes from block offset src to plane record offset dst
  };
  int block_elems = 1, block_bytes = 1;  // the file format
  int n_planes = 1;
  int plane_bytes[4] = {};
  int n_segments = 0;
  Segment segments[4] = {};
};

// Throws nt::Error for formats the CUDA backend cannot run.
const WeightLayout& weight_layout(TensorType type);

// Device bytes a rows x cols matrix of `type` occupies (planes 256-byte aligned).
// Throws if cols is not a multiple of 32 or of the format's block.
uint64_t device_matrix_bytes(TensorType type, int64_t rows, int64_t cols);

}  // namespace nt

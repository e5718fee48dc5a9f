#include "backend/cuda/weights/device_matrix.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <array>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/kernels/launch.cuh"

namespace nt {
namespace {

using Seg = WeightLayout::Segment;

struct RepackArgs {
  WeightLayout layout;
  const uint8_t* src;
  uint8_t* plane[4];  // already offset to the first block being written
  int64_t n_blocks;
};

// PRECOND: src holds n_blocks whole file blocks. One thread per block; bytes
// moved: n_blocks * block_bytes read and written. Runs once per upload.
__global__ void repack_blocks_kernel(RepackArgs a) {
  const int64_t b = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b >= a.n_blocks) return;
  const uint8_t* src = a.src + b * a.layout.block_bytes;
  for (int p = 0; p < a.layout.n_planes; ++p) {  // zero first: Q3_K's record has padding
    uint8_t* dst = a.plane[p] + b * a.layout.plane_bytes[p];
    for (int i = 0; i < a.layout.plane_bytes[p]; ++i) dst[i] = 0;
  }
  for (int s = 0; s < a.layout.n_segments; ++s) {
    const Seg seg = a.layout.segments[s];
    uint8_t* dst = a.plane[seg.plane] + b * a.layout.plane_bytes[seg.plane] + seg.dst;
    for (int i = 0; i < seg.len; ++i) dst[i] = src[seg.src + i];
  }
}

// For the per-pass re-lay of streamed layers: where each byte of a plane
// record comes from in the file block (-1: padding, zero).
struct PlaneSourceMap {
  int16_t src[4][128];
};

PlaneSourceMap plane_source_map(const WeightLayout& l) {
  PlaneSourceMap map;
  for (auto& plane : map.src) {
    for (int16_t& b : plane) b = -1;
  }
  for (int s = 0; s < l.n_segments; ++s) {
    const Seg seg = l.segments[s];
    for (int i = 0; i < seg.len; ++i) map.src[seg.plane][seg.dst + i] = int16_t(seg.src + i);
  }
  return map;
}

// Bytes of a plane record each thread of relay_planes_kernel writes: four
// when the record size allows aligned 4-byte stores, else one.
__host__ __device__ inline int relay_unit(int plane_bytes) { return plane_bytes % 4 == 0 ? 4 : 1; }

// One thread per relay_unit destination bytes of plane blockIdx.y, so
// consecutive threads write consecutive bytes and read within a few
// neighbouring file blocks: coalesced, unlike repack_blocks_kernel's
// thread-per-block byte loops, which matters when the re-lay runs for every
// streamed layer of every pass (byte stores: 5.3 ms a 70B Q4_K_M layer on the H200).
__global__ void relay_planes_kernel(RepackArgs a, PlaneSourceMap map) {
  const int p = int(blockIdx.y);
  if (p >= a.layout.n_planes) return;
  const int pb = a.layout.plane_bytes[p];
  const int unit = relay_unit(pb);
  const int64_t i = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * unit;
  if (i >= a.n_blocks * pb) return;
  const int64_t b = i / pb;
  const int r = int(i - b * pb);
  const uint8_t* block = a.src + b * a.layout.block_bytes;
  const auto byte = [&](int at) {
    const int src = map.src[p][at];
    return src >= 0 ? block[src] : uint8_t(0);
  };
  if (unit == 4) {
    *reinterpret_cast<uchar4*>(a.plane[p] + i) = make_uchar4(byte(r), byte(r + 1), byte(r + 2), byte(r + 3));
  } else {
    a.plane[p][i] = byte(r);
  }
}

}  // namespace

int64_t DeviceMatrix::blocks_per_row() const { return cols / weight_layout(type).block_elems; }

DeviceMatrix place_device_matrix(TensorType type, int64_t rows, int64_t cols, void* memory) {
  const WeightLayout& l = weight_layout(type);
  DeviceMatrix m;
  m.type = type;
  m.rows = rows;
  m.cols = cols;
  device_matrix_bytes(type, rows, cols);  // validates cols
  const uint64_t blocks = uint64_t(rows) * uint64_t(cols / l.block_elems);
  auto* at = static_cast<uint8_t*>(memory);
  for (int p = 0; p < l.n_planes; ++p) {
    m.plane[p] = at;
    at += align_device(blocks * uint64_t(l.plane_bytes[p]));
  }
  return m;
}

DeviceMatrix offset_device_matrix(const DeviceMatrix& m, uint64_t bytes) {
  DeviceMatrix shifted = m;
  for (uint8_t*& plane : shifted.plane) {
    if (plane) plane += bytes;
  }
  return shifted;
}

void upload_matrix_rows(const DeviceMatrix& m, int64_t first_row, int64_t n_rows, const void* host_rows,
                        void* staging, uint64_t staging_bytes) {
  const WeightLayout& l = weight_layout(m.type);
  const int64_t blocks_per_row = m.blocks_per_row();
  const uint64_t row_bytes = uint64_t(blocks_per_row) * uint64_t(l.block_bytes);
  if (first_row < 0 || n_rows < 0 || first_row + n_rows > m.rows) {
    fail("upload of rows [{}, {}) outside a matrix of {} rows", first_row, first_row + n_rows, m.rows);
  }
  const auto* src = static_cast<const uint8_t*>(host_rows);
  if (l.n_segments == 0) {  // file layout kept: copy straight into the plane
    NT_CUDA_CHECK(cudaMemcpy(m.plane[0] + uint64_t(first_row) * row_bytes, src, uint64_t(n_rows) * row_bytes,
                             cudaMemcpyHostToDevice));
    return;
  }
  if (staging_bytes < row_bytes) fail("upload staging buffer of {} bytes is smaller than one row ({})", staging_bytes, row_bytes);
  const int64_t rows_per_chunk = int64_t(staging_bytes / row_bytes);
  for (int64_t r = 0; r < n_rows; r += rows_per_chunk) {
    const int64_t chunk_rows = std::min(rows_per_chunk, n_rows - r);
    NT_CUDA_CHECK(cudaMemcpy(staging, src + uint64_t(r) * row_bytes, uint64_t(chunk_rows) * row_bytes, cudaMemcpyHostToDevice));
    RepackArgs a;
    a.layout = l;
    a.src = static_cast<const uint8_t*>(staging);
    const int64_t first_block = (first_row + r) * blocks_per_row;
    for (int p = 0; p < 4; ++p) a.plane[p] = m.plane[p] ? m.plane[p] + first_block * l.plane_bytes[p] : nullptr;
    a.n_blocks = chunk_rows * blocks_per_row;
    const int threads = 256;
    repack_blocks_kernel<<<cuda::blocks_for(a.n_blocks, threads), threads>>>(a);
    NT_CUDA_CHECK_LAUNCH();
  }
  NT_CUDA_CHECK(cudaDeviceSynchronize());
}

void relay_matrix_rows_async(const DeviceMatrix& m, int64_t first_row, int64_t n_rows, const void* device_rows,
                             cudaStream_t stream) {
  const WeightLayout& l = weight_layout(m.type);
  const int64_t blocks_per_row = m.blocks_per_row();
  const uint64_t row_bytes = uint64_t(blocks_per_row) * uint64_t(l.block_bytes);
  if (first_row < 0 || n_rows < 0 || first_row + n_rows > m.rows) {
    fail("re-lay of rows [{}, {}) outside a matrix of {} rows", first_row, first_row + n_rows, m.rows);
  }
  if (n_rows == 0) return;
  if (l.n_segments == 0) {
    NT_CUDA_CHECK(cudaMemcpyAsync(m.plane[0] + uint64_t(first_row) * row_bytes, device_rows, uint64_t(n_rows) * row_bytes,
                                  cudaMemcpyDeviceToDevice, stream));
    return;
  }
  RepackArgs a;
  a.layout = l;
  a.src = static_cast<const uint8_t*>(device_rows);
  const int64_t first_block = first_row * blocks_per_row;
  for (int p = 0; p < 4; ++p) a.plane[p] = m.plane[p] ? m.plane[p] + first_block * l.plane_bytes[p] : nullptr;
  a.n_blocks = n_rows * blocks_per_row;
  int64_t widest = 0;  // threads of the plane that needs the most
  for (int p = 0; p < l.n_planes; ++p) widest = std::max(widest, a.n_blocks * l.plane_bytes[p] / relay_unit(l.plane_bytes[p]));
  const int threads = 256;
  const dim3 grid(cuda::blocks_for(widest, threads), unsigned(l.n_planes));
  relay_planes_kernel<<<grid, threads, 0, stream>>>(a, plane_source_map(l));
  NT_CUDA_CHECK_LAUNCH();
}

}  // namespace nt

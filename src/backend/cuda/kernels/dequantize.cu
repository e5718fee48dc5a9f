#include "backend/cuda/kernels/dequantize.h"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels/launch.cuh"
#include "backend/cuda/kernels/weight_formats.cuh"

namespace nt {
namespace {

using cuda::add;
using cuda::kLowNibbles;
using cuda::mul;
using cuda::sub;

// Byte k (0..3) of w minus `offset`, as an exact float: the byte becomes the
// low mantissa bits of 1.5 * 2^23 (one byte permute) and one subtract removes
// both, where a conversion instruction would queue on the narrow conversion unit.
__device__ __forceinline__ float byte_minus(uint32_t w, int k, float offset) {
  return __uint_as_float(__byte_perm(w, 0x4B400000u, 0x7650u | unsigned(k))) - (12582912.0f + offset);
}

// The 8 bytes of (lo, hi), each minus `offset`, as floats.
__device__ __forceinline__ void bytes_minus(uint32_t lo, uint32_t hi, float offset, float* v) {
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    v[k] = byte_minus(lo, k, offset);
    v[4 + k] = byte_minus(hi, k, offset);
  }
}

template <class T>
__device__ __forceinline__ T load(const uint8_t* p) {
  return __ldg(reinterpret_cast<const T*>(p));
}

// Decode8<F>::run(m, row, col, v): elements col..col+7 of a row (col a
// multiple of 8, so inside one block) as the same floats F::dequant32 gives:
// the same float operations in the same order, on integers that are exact
// either way. 8 elements are one thread's 16-byte f16 store; their codes are
// 8 consecutive bytes of a code plane (one 8-byte load) in every format.
template <class F>
struct Decode8;

template <>
struct Decode8<cuda::FormatF32> {
  static __device__ void run(const DeviceMatrix& m, int64_t row, int col, float* v) {
    const uint8_t* src = m.plane[0] + (row * m.cols + col) * 4;
    const uint4 a = cuda::load_stream16(src), b = cuda::load_stream16(src + 16);
    const uint32_t w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = __uint_as_float(w[i]);
  }
};

template <bool kBf16>
struct Decode8<cuda::FormatHalf<kBf16>> {
  static __device__ void run(const DeviceMatrix& m, int64_t row, int col, float* v) {
    const uint4 a = cuda::load_stream16(m.plane[0] + (row * m.cols + col) * 2);
    const uint32_t w[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint16_t lo = uint16_t(w[i] & 0xffff), hi = uint16_t(w[i] >> 16);
      v[2 * i] = kBf16 ? cuda::bf16_to_float(lo) : cuda::half_to_float(lo);
      v[2 * i + 1] = kBf16 ? cuda::bf16_to_float(hi) : cuda::half_to_float(hi);
    }
  }
};

// Quarter k of a 32-element block: k < 2 are the low nibbles of qs bytes
// 8k..8k+7, k >= 2 the high nibbles of bytes 8(k-2)..; the fifth bits are
// qh bits 8k..8k+7 either way.
template <bool kFifthBit, bool kMin>
struct Decode8<cuda::FormatLegacy4<kFifthBit, kMin>> {
  using F = cuda::FormatLegacy4<kFifthBit, kMin>;
  static __device__ void run(const DeviceMatrix& m, int64_t row, int col, float* v) {
    const int64_t b = row * (m.cols / 32) + col / 32;
    const int k = (col % 32) / 8;
    const uint2 q = load<uint2>(m.plane[0] + b * 16 + 8 * (k % 2));
    uint32_t lo = (q.x >> (4 * (k / 2))) & kLowNibbles, hi = (q.y >> (4 * (k / 2))) & kLowNibbles;
    if constexpr (kFifthBit) {
      const uint32_t h = (load<uint32_t>(m.plane[1] + b * 4) >> (8 * k)) & 0xffu;
      lo |= uint32_t(cuda::fifth_bits(h & 15u));
      hi |= uint32_t(cuda::fifth_bits(h >> 4));
    }
    const uint32_t dm = kMin ? load<uint32_t>(m.plane[F::kScalePlane] + b * 4) : load<uint16_t>(m.plane[F::kScalePlane] + b * 2);
    const float d = cuda::half_to_float(uint16_t(dm & 0xffff));
    if constexpr (kMin) {
      const float mn = cuda::half_to_float(uint16_t(dm >> 16));
      bytes_minus(lo, hi, 0.0f, v);
#pragma unroll
      for (int i = 0; i < 8; ++i) v[i] = add(mul(v[i], d), mn);
    } else {
      bytes_minus(lo, hi, kFifthBit ? 16.0f : 8.0f, v);
#pragma unroll
      for (int i = 0; i < 8; ++i) v[i] = mul(v[i], d);
    }
  }
};

template <>
struct Decode8<cuda::FormatQ8_0> {
  static __device__ void run(const DeviceMatrix& m, int64_t row, int col, float* v) {
    const int64_t b = row * (m.cols / 32) + col / 32;
    const uint2 q = load<uint2>(m.plane[0] + b * 32 + col % 32);
    const float d = cuda::half_to_float(load<uint16_t>(m.plane[1] + b * 2));
    // Flipping the sign bits turns each int8 q into the byte q + 128.
    bytes_minus(q.x ^ 0x80808080u, q.y ^ 0x80808080u, 128.0f, v);
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = mul(v[i], d);
  }
};

// MXFP4: quarters as Q4_0's, each code's value from FormatMXFP4's table.
template <>
struct Decode8<cuda::FormatMXFP4> {
  using F = cuda::FormatMXFP4;
  static __device__ void run(const DeviceMatrix& m, int64_t row, int col, float* v) {
    const int64_t b = row * (m.cols / 32) + col / 32;
    const int k = (col % 32) / 8;
    const uint2 q = load<uint2>(m.plane[0] + b * 16 + 8 * (k % 2));
    const uint32_t lo = uint32_t(F::values((q.x >> (4 * (k / 2))) & kLowNibbles));
    const uint32_t hi = uint32_t(F::values((q.y >> (4 * (k / 2))) & kLowNibbles));
    const float d = F::scale(load<uint8_t>(m.plane[1] + b));
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      v[i] = mul(float(int8_t(lo >> (8 * i))), d);
      v[4 + i] = mul(float(int8_t(hi >> (8 * i))), d);
    }
  }
};

// K-quants: element e = col % 256 of super-block sb; the layouts are those
// listed in weight_formats.cuh (l = e % 32 is the byte inside a 32-byte run).
template <bool kFifthBit>
struct Decode8<cuda::FormatQ45_K<kFifthBit>> {
  using F = cuda::FormatQ45_K<kFifthBit>;
  static __device__ void run(const DeviceMatrix& m, int64_t row, int col, float* v) {
    const int64_t sb = row * (m.cols / 256) + col / 256;
    const int e = col % 256, j = e / 32, l = e % 32;
    const uint4 header = load<uint4>(m.plane[F::kHeaderPlane] + sb * 16);
    int sc, mn;
    cuda::k_scale_min(header, j, sc, mn);
    const float scale = mul(cuda::half_to_float(uint16_t(header.x & 0xffff)), float(sc));
    const float min = mul(cuda::half_to_float(uint16_t(header.x >> 16)), float(mn));
    const uint2 q = load<uint2>(m.plane[0] + sb * 128 + 32 * (j / 2) + l);
    uint32_t lo = (q.x >> (4 * (j % 2))) & kLowNibbles, hi = (q.y >> (4 * (j % 2))) & kLowNibbles;
    if constexpr (kFifthBit) {
      const uint2 qh = load<uint2>(m.plane[1] + sb * 32 + l);
      lo |= ((qh.x >> j) & 0x01010101u) << 4;
      hi |= ((qh.y >> j) & 0x01010101u) << 4;
    }
    bytes_minus(lo, hi, 0.0f, v);
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = sub(mul(scale, v[i]), min);
  }
};

template <>
struct Decode8<cuda::FormatQ6_K> {
  static __device__ void run(const DeviceMatrix& m, int64_t row, int col, float* v) {
    const int64_t sb = row * (m.cols / 256) + col / 256;
    const int e = col % 256, c = e / 128, j = (e % 128) / 32, l = e % 32;
    const uint2 ql = load<uint2>(m.plane[0] + sb * 128 + 64 * c + 32 * (j % 2) + l);
    const uint2 qh = load<uint2>(m.plane[1] + sb * 64 + 32 * c + l);
    const int sc = int(load<int8_t>(m.plane[2] + sb * 16 + e / 16));
    const float d = cuda::half_to_float(load<uint16_t>(m.plane[3] + sb * 2));
    const int shift = 4 * (j / 2);
    const uint32_t lo = ((ql.x >> shift) & kLowNibbles) | (((qh.x >> (2 * j)) & 0x03030303u) << 4);
    const uint32_t hi = ((ql.y >> shift) & kLowNibbles) | (((qh.y >> (2 * j)) & 0x03030303u) << 4);
    bytes_minus(lo, hi, 32.0f, v);
    const float scale = mul(d, float(sc));
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = mul(scale, v[i]);
  }
};

template <>
struct Decode8<cuda::FormatQ2_K> {
  static __device__ void run(const DeviceMatrix& m, int64_t row, int col, float* v) {
    const int64_t sb = row * (m.cols / 256) + col / 256;
    const int e = col % 256, c = e / 128, j = (e % 128) / 32, l = e % 32;
    const uint2 q = load<uint2>(m.plane[0] + sb * 64 + 32 * c + l);
    const int sc = load<uint8_t>(m.plane[1] + sb * 16 + e / 16);
    const uint32_t dm = load<uint32_t>(m.plane[2] + sb * 4);
    const float scale = mul(cuda::half_to_float(uint16_t(dm & 0xffff)), float(sc & 15));
    const float min = mul(cuda::half_to_float(uint16_t(dm >> 16)), float(sc >> 4));
    bytes_minus((q.x >> (2 * j)) & 0x03030303u, (q.y >> (2 * j)) & 0x03030303u, 0.0f, v);
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = sub(mul(scale, v[i]), min);
  }
};

// Q3_K: with the hmask bit as bit 2, the 3-bit value is the code + 4.
template <>
struct Decode8<cuda::FormatQ3_K> {
  static __device__ void run(const DeviceMatrix& m, int64_t row, int col, float* v) {
    const int64_t sb = row * (m.cols / 256) + col / 256;
    const int e = col % 256, c = e / 128, j = (e % 128) / 32, l = e % 32;
    const uint2 q = load<uint2>(m.plane[0] + sb * 64 + 32 * c + l);
    const uint2 hm = load<uint2>(m.plane[1] + sb * 32 + l);
    const uint4 meta = load<uint4>(m.plane[2] + sb * 16);
    const uint32_t lo = ((q.x >> (2 * j)) & 0x03030303u) | (((hm.x >> (e / 32)) & 0x01010101u) << 2);
    const uint32_t hi = ((q.y >> (2 * j)) & 0x03030303u) | (((hm.y >> (e / 32)) & 0x01010101u) << 2);
    bytes_minus(lo, hi, 4.0f, v);
    const float scale = mul(cuda::half_to_float(uint16_t(meta.w & 0xffff)), float(cuda::FormatQ3_K::scale(meta, e / 16)));
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = mul(scale, v[i]);
  }
};

__device__ __forceinline__ uint32_t pack_halves(float a, float b) {
  const __half2 h = __floats2half2_rn(a, b);  // both rounded to nearest, as float_to_half
  return uint32_t(__half_as_ushort(h.x)) | uint32_t(__half_as_ushort(h.y)) << 16;
}

constexpr int kDequantThreads = 256;
constexpr int kDequantRows = 4;

// PRECOND: cols % 32 == 0 (and the format's block). Each thread decodes 8
// consecutive elements of kDequantRows rows and writes each row's as one
// 16-byte store, so a warp writes 512 contiguous bytes and reads its codes as
// whole sectors; all rows' loads are issued before any decoding, and the
// column arithmetic is shared. Bytes moved: the rows once in their format
// plus 2 per element written. Block b covers 8*blockDim.x columns (tile
// b % col_tiles) of kDequantRows rows (group b / col_tiles).
template <class F>
__global__ void __launch_bounds__(kDequantThreads) dequantize_f16_kernel(DeviceMatrix m, int64_t first_row, int64_t n_rows,
                                                                         unsigned col_tiles, uint16_t* out) {
  cuda::allow_dependents();
  cuda::wait_for_inputs();
  const unsigned group = blockIdx.x / col_tiles, tile = blockIdx.x - group * col_tiles;
  const int col = int(tile * blockDim.x + threadIdx.x) * 8;
  if (col >= m.cols) return;
  const int64_t r0 = int64_t(group) * kDequantRows;
  uint4 h[kDequantRows];
#pragma unroll
  for (int k = 0; k < kDequantRows; ++k) {
    if (r0 + k >= n_rows) break;
    float v[8];
    Decode8<F>::run(m, first_row + r0 + k, col, v);
    h[k] = make_uint4(pack_halves(v[0], v[1]), pack_halves(v[2], v[3]), pack_halves(v[4], v[5]), pack_halves(v[6], v[7]));
  }
#pragma unroll
  for (int k = 0; k < kDequantRows; ++k) {
    if (r0 + k >= n_rows) break;
    *reinterpret_cast<uint4*>(out + (r0 + k) * m.cols + col) = h[k];
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


}  // namespace

void dequantize_rows_f16(const DeviceMatrix& m, int64_t first_row, int64_t n_rows, uint16_t* out, cudaStream_t stream) {
  if (n_rows == 0 || m.cols == 0) return;
  const unsigned col_tiles = cuda::blocks_for(m.cols / 8, kDequantThreads);
  const int64_t blocks = ceil_div(n_rows, kDequantRows) * col_tiles;
  if (blocks > 0x7fffffff) fail("dequantize of {} rows x {} columns needs more thread blocks than a grid holds", n_rows, m.cols);
  cuda::dispatch_format(m.type, [&](auto format) {
    using F = decltype(format);
    cuda::launch_kernel(dequantize_f16_kernel<F>, dim3(unsigned(blocks)), dim3(kDequantThreads), 0, stream, m, first_row, n_rows,
                        col_tiles, out);
  });
  NT_CUDA_CHECK_LAUNCH();
}

void gather_rows_f32(const DeviceMatrix& m, const int32_t* ids, int64_t n_ids, float* out, cudaStream_t stream) {
  const int64_t n_chunks = n_ids * (m.cols / 32);
  if (n_chunks == 0) return;
  cuda::dispatch_format(m.type, [&](auto format) {
    using F = decltype(format);
    cuda::launch_kernel(gather_f32_kernel<F>, dim3(cuda::blocks_for(n_chunks, 128)), dim3(128), 0, stream, m, ids, n_chunks, out);
  });
  NT_CUDA_CHECK_LAUNCH();
}

}  // namespace nt

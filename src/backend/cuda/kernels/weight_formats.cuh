// Device-side decoding of every weight format, in the plane layout of
// device_matrix.h. Each format is a struct the kernels are templated on:
//
//   kUnitElems  elements one lane decodes per step of a mat-vec row; a unit is
//               one 16-byte chunk of the code plane (more for F32/F16 rows), so
//               consecutive lanes read consecutive chunks: whole sectors
//   kUnroll     steps whose loads a lane issues before using any; the values are
//               the fastest of 1/2/4/8 in cuda_bench's sweep on an H200 (fewer
//               registers and more resident warps beat deeper unrolling)
//   kType       the tensor type (the formats a mixed launch can tell apart)
//   kQ8         true: dot() takes q8 activations (int8 + per-32 (d, d*sum q)) and
//               uses dp4a; false: dot() takes float activations
//   Regs        the raw bytes of one unit, loaded by load(), used by dot(unit),
//               which finds the unit's activations from the row start
//   dequant32   32 consecutive elements (chunk c of a row) as floats, computed
//               with the same float operations as quant/quant.h's reference
//
// Quantized units apply block scales after the integer dot product.
#pragma once

#include "backend/cuda/kernels/device_util.cuh"
#include "backend/cuda/weights/device_matrix.h"

namespace nt::cuda {

constexpr uint32_t kLowNibbles = 0x0f0f0f0fu;

// Record `block` of plane p, where block counts from the start of the matrix.
__device__ __forceinline__ const uint8_t* plane_record(const DeviceMatrix& m, int p, int64_t block, int bytes) {
  return m.plane[p] + block * bytes;
}

// Spreads bits 0..3 of h into bit 4 of each byte (the fifth bit of 4 codes).
__device__ __forceinline__ int fifth_bits(uint32_t h) {
  return int(((h & 1u) << 4) | ((h & 2u) << 11) | ((h & 4u) << 18) | ((h & 8u) << 25));
}

__device__ __forceinline__ float mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float sub(float a, float b) { return __fsub_rn(a, b); }
__device__ __forceinline__ float add(float a, float b) { return __fadd_rn(a, b); }

// ---------------------------------------------------------------- float formats

struct FormatF32 {
  static constexpr int kUnitElems = 4, kUnroll = 2;
  static constexpr bool kQ8 = false;
  struct Regs { uint4 w; };
  static __device__ Regs load(const DeviceMatrix& m, int64_t row, int unit) {
    return {load_stream16(m.plane[0] + (row * m.cols + int64_t(unit) * 4) * 4)};
  }
  static __device__ float dot(const Regs& r, const float* x_row, int unit) {
    const float4 a = __ldg(reinterpret_cast<const float4*>(x_row) + unit);
    return __uint_as_float(r.w.x) * a.x + __uint_as_float(r.w.y) * a.y + __uint_as_float(r.w.z) * a.z +
           __uint_as_float(r.w.w) * a.w;
  }
  static __device__ void dequant32(const DeviceMatrix& m, int64_t row, int64_t chunk, float* out) {
    const float* src = reinterpret_cast<const float*>(m.plane[0]) + row * m.cols + chunk * 32;
#pragma unroll
    for (int i = 0; i < 32; ++i) out[i] = src[i];
  }
};

template <bool kBf16>
struct FormatHalf {
  static constexpr int kUnitElems = 8, kUnroll = 2;
  static constexpr bool kQ8 = false;
  struct Regs { uint4 w; };
  static __device__ float2 pair(uint32_t w) {
    if constexpr (kBf16) {
      return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
    } else {
      return __half22float2(*reinterpret_cast<const __half2*>(&w));
    }
  }
  static __device__ Regs load(const DeviceMatrix& m, int64_t row, int unit) {
    return {load_stream16(m.plane[0] + (row * m.cols + int64_t(unit) * 8) * 2)};
  }
  static __device__ float dot(const Regs& r, const float* x_row, int unit) {
    const float4 a = __ldg(reinterpret_cast<const float4*>(x_row) + 2 * unit);
    const float4 b = __ldg(reinterpret_cast<const float4*>(x_row) + 2 * unit + 1);
    const float2 w0 = pair(r.w.x), w1 = pair(r.w.y), w2 = pair(r.w.z), w3 = pair(r.w.w);
    return w0.x * a.x + w0.y * a.y + w1.x * a.z + w1.y * a.w + w2.x * b.x + w2.y * b.y + w3.x * b.z + w3.y * b.w;
  }
  static __device__ void dequant32(const DeviceMatrix& m, int64_t row, int64_t chunk, float* out) {
    const uint16_t* src = reinterpret_cast<const uint16_t*>(m.plane[0]) + row * m.cols + chunk * 32;
#pragma unroll
    for (int i = 0; i < 32; ++i) out[i] = kBf16 ? bf16_to_float(src[i]) : half_to_float(src[i]);
  }
};
using FormatF16 = FormatHalf<false>;
using FormatBF16 = FormatHalf<true>;

// ---------------------------------------------------------------- legacy 32-element blocks

// The integer dot product of a 32-element block of 4-bit codes (byte i holds
// element i in its low nibble and 16 + i in its high one, as Q4_0 and MXFP4
// pack them) with the block's q8 activations xq. values(k, high, nibbles)
// turns the four low (high = false) or high nibbles of code word k, one in
// each byte's low bits, into the four int8 values dp4a multiplies.
template <class Values>
__device__ __forceinline__ int nibble_block_dot(const uint4& q, const int8_t* xq, Values values) {
  const int4 xa = load_int4(xq), xb = load_int4(xq + 16);
  const int lo_x[4] = {xa.x, xa.y, xa.z, xa.w}, hi_x[4] = {xb.x, xb.y, xb.z, xb.w};
  int sum = 0;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const uint32_t w = uint32_t(word_at(q, k));
    sum = __dp4a(values(k, false, w & kLowNibbles), lo_x[k], sum);
    sum = __dp4a(values(k, true, (w >> 4) & kLowNibbles), hi_x[k], sum);
  }
  return sum;
}

// Q4_0: x = (q - 8) d. Q4_1: x = q d + m. Q5_*: q gains a fifth bit from qh
// (and Q5_0 subtracts 16). Byte i of qs holds element i (low nibble) and 16+i.
template <bool kFifthBit, bool kMin>
struct FormatLegacy4 {
  static constexpr int kUnitElems = 32, kUnroll = 2;
  static constexpr bool kQ8 = true;
  // planes: qs[16] | (Q5: qh[4]) | d or (d, m)
  static constexpr int kScalePlane = kFifthBit ? 2 : 1;
  static constexpr int kScaleBytes = kMin ? 4 : 2;
  struct Regs {
    uint4 q;
    uint32_t qh;
    uint32_t dm;  // d in the low half, m in the high half
  };
  static __device__ Regs load(const DeviceMatrix& m, int64_t row, int unit) {
    const int64_t b = row * (m.cols / 32) + unit;
    Regs r;
    r.q = load_stream16(plane_record(m, 0, b, 16));
    r.qh = kFifthBit ? __ldg(reinterpret_cast<const uint32_t*>(plane_record(m, 1, b, 4))) : 0u;
    r.dm = kMin ? __ldg(reinterpret_cast<const uint32_t*>(plane_record(m, kScalePlane, b, 4)))
                : __ldg(reinterpret_cast<const uint16_t*>(plane_record(m, kScalePlane, b, 2)));
    return r;
  }
  static __device__ float dot(const Regs& r, const int8_t* xq_row, const float2* xds_row, int unit) {
    const int sum = nibble_block_dot(r.q, xq_row + 32 * unit, [&](int k, bool high, uint32_t nibbles) {
      int codes = int(nibbles);
      if constexpr (kFifthBit) codes |= fifth_bits(r.qh >> ((high ? 16 : 0) + 4 * k));
      return codes;
    });
    const float2 xd = __ldg(xds_row + unit);
    const float d = half_to_float(uint16_t(r.dm & 0xffff));
    if constexpr (kMin) {
      return d * xd.x * float(sum) + half_to_float(uint16_t(r.dm >> 16)) * xd.y;
    } else {
      return d * (xd.x * float(sum) - (kFifthBit ? 16.0f : 8.0f) * xd.y);
    }
  }
  static __device__ void dequant32(const DeviceMatrix& m, int64_t row, int64_t chunk, float* out) {
    const Regs r = load(m, row, int(chunk));
    const float d = half_to_float(uint16_t(r.dm & 0xffff));
    const float mn = kMin ? half_to_float(uint16_t(r.dm >> 16)) : 0.0f;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const int byte = byte_at(r.q, i);
      int lo = byte & 15, hi = byte >> 4;
      if constexpr (kFifthBit) {
        lo |= int((r.qh >> i) & 1u) << 4;
        hi |= int((r.qh >> (i + 16)) & 1u) << 4;
      }
      if constexpr (kMin) {
        out[i] = add(mul(float(lo), d), mn);
        out[i + 16] = add(mul(float(hi), d), mn);
      } else {
        const int offset = kFifthBit ? 16 : 8;
        out[i] = mul(float(lo - offset), d);
        out[i + 16] = mul(float(hi - offset), d);
      }
    }
  }
};
using FormatQ4_0 = FormatLegacy4<false, false>;
using FormatQ4_1 = FormatLegacy4<false, true>;
using FormatQ5_0 = FormatLegacy4<true, false>;
using FormatQ5_1 = FormatLegacy4<true, true>;

// Q8_0: x = q d. planes: qs[32] | d. A unit is half a block.
struct FormatQ8_0 {
  static constexpr int kUnitElems = 16, kUnroll = 2;
  static constexpr bool kQ8 = true;
  struct Regs { uint4 q; uint32_t d; };
  static __device__ Regs load(const DeviceMatrix& m, int64_t row, int unit) {
    const int64_t u = row * (m.cols / 16) + unit;
    return {load_stream16(m.plane[0] + u * 16), __ldg(reinterpret_cast<const uint16_t*>(plane_record(m, 1, u / 2, 2)))};
  }
  static __device__ float dot(const Regs& r, const int8_t* xq_row, const float2* xds_row, int unit) {
    const int4 x = load_int4(xq_row + 16 * unit);
    int sum = __dp4a(int(r.q.x), x.x, 0);
    sum = __dp4a(int(r.q.y), x.y, sum);
    sum = __dp4a(int(r.q.z), x.z, sum);
    sum = __dp4a(int(r.q.w), x.w, sum);
    return half_to_float(uint16_t(r.d)) * __ldg(xds_row + unit / 2).x * float(sum);
  }
  static __device__ void dequant32(const DeviceMatrix& m, int64_t row, int64_t chunk, float* out) {
    const int64_t b = row * (m.cols / 32) + chunk;
    const int8_t* q = reinterpret_cast<const int8_t*>(plane_record(m, 0, b, 32));
    const float d = half_to_float(*reinterpret_cast<const uint16_t*>(plane_record(m, 1, b, 2)));
    for (int i = 0; i < 32; ++i) out[i] = mul(float(q[i]), d);
  }
};

// MXFP4: x = v[q] * 2^(e - 128), v the doubled E2M1 values of
// quant/blocks.h (integers, -12 to 12) and e the E8M0 exponent. planes:
// qs[16] | e. Byte i of qs holds element i (low nibble) and 16+i, as Q4_0.
struct FormatMXFP4 {
  static constexpr int kUnitElems = 32, kUnroll = 2;
  static constexpr bool kQ8 = true;
  struct Regs {
    uint4 q;
    uint32_t e;
  };
  static __device__ Regs load(const DeviceMatrix& m, int64_t row, int unit) {
    const int64_t b = row * (m.cols / 32) + unit;
    return {load_stream16(plane_record(m, 0, b, 16)), uint32_t(__ldg(plane_record(m, 1, b, 1)))};
  }
  // The values of four codes (the low nibbles of a word's bytes), one int8
  // a byte: the code's low three bits pick a byte of the positive or the
  // negative half of the table, its fourth bit which half.
  static __device__ int values(uint32_t codes) {
    constexpr uint32_t kPositive[2] = {0x03020100u, 0x0c080604u};  // 0 1 2 3 | 4 6 8 12
    constexpr uint32_t kNegative[2] = {0xfdfeff00u, 0xf4f8fafcu};  // 0 -1 -2 -3 | -4 -6 -8 -12
    const uint32_t select = (codes & 0xfu) | ((codes >> 4) & 0xf0u) | ((codes >> 8) & 0xf00u) | ((codes >> 12) & 0xf000u);
    const uint32_t positive = __byte_perm(kPositive[0], kPositive[1], select);
    const uint32_t negative = __byte_perm(kNegative[0], kNegative[1], select);
    const uint32_t sign = ((codes >> 3) & 0x01010101u) * 0xffu;
    return int((positive & ~sign) | (negative & sign));
  }
  // 2^(e - 128), as mxfp4_scale: subnormal below e = 2.
  static __device__ float scale(uint32_t e) { return __uint_as_float(e < 2 ? 0x00200000u << e : (e - 1) << 23); }
  static __device__ float dot(const Regs& r, const int8_t* xq_row, const float2* xds_row, int unit) {
    const int sum = nibble_block_dot(r.q, xq_row + 32 * unit, [](int, bool, uint32_t nibbles) { return values(nibbles); });
    return scale(r.e) * (__ldg(xds_row + unit).x * float(sum));
  }
  static __device__ void dequant32(const DeviceMatrix& m, int64_t row, int64_t chunk, float* out) {
    const Regs r = load(m, row, int(chunk));
    const float d = scale(r.e);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uint32_t q = uint32_t(word_at(r.q, k));
      const uint32_t lo = uint32_t(values(q & kLowNibbles)), hi = uint32_t(values((q >> 4) & kLowNibbles));
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        out[4 * k + j] = mul(float(int8_t(lo >> (8 * j))), d);
        out[16 + 4 * k + j] = mul(float(int8_t(hi >> (8 * j))), d);
      }
    }
  }
};

// ---------------------------------------------------------------- K-quants (256-element super-blocks)
//
// Units are 16-byte chunks of the code plane, so a lane decodes elements
// spread over the super-block; element e sits at:
//  Q4_K/Q5_K qs: e = 64c + 32n + l          -> byte 32c + l, nibble n (sub-block 2c + n)
//  Q5_K qh:      e = 32j + l                -> qh byte l, bit j
//  Q6_K ql:      e = 128c + 64n + 32a + l   -> byte 64c + 32a + l, nibble n (j = 2n + a)
//  Q6_K qh, Q2_K/Q3_K qs: e = 128c + 32j + l -> byte 32c + l, bits 2j
//  Q3_K hmask:   e = 32j' + l               -> byte l, bit j' (j' = 4c + j)
// with l < 32. 16-element scale groups are s = e / 16.

// Exact int -> float for |v| < 2^22: an integer add into the mantissa of
// 1.5 * 2^23 and a float subtract run on the ALU and FMA pipes, where a
// conversion instruction would queue on the 4x narrower conversion unit
// (the decode loops convert several values per 16 bytes of weights).
__device__ __forceinline__ float small_int_to_float(int v) { return __int_as_float(0x4B400000 + v) - 12582912.0f; }

// The six-bit scales and mins of Q4_K/Q5_K sub-blocks 2c and 2c + 1 as byte
// pairs (sub-block 2c in the low byte), from a header (d, dmin, scales[12])
// held in a 16-byte vector: 16-bit lanes decode both sub-blocks at once.
__device__ __forceinline__ void k_scale_min_pair(const uint4& header, int c, uint32_t& scales, uint32_t& mins) {
  const int shift = 16 * (c & 1);
  const uint32_t s0 = header.y >> shift, s4 = header.z >> shift, s8 = header.w >> shift;  // s(2c'), s(4+2c'), s(8+2c')
  // Both forms, then a select: lanes of a warp hold different c, and a branch would run both paths.
  const uint32_t low_scales = s0 & 0x3f3fu, low_mins = s4 & 0x3f3fu;
  const uint32_t high_scales = (s8 & 0x0f0fu) | ((s0 >> 2) & 0x3030u), high_mins = ((s8 >> 4) & 0x0f0fu) | ((s4 >> 2) & 0x3030u);
  scales = c < 2 ? low_scales : high_scales;
  mins = c < 2 ? low_mins : high_mins;
}

// Q4_K/Q5_K six-bit scale and min of sub-block j from a header (d, dmin,
// scales[12]) held in a 16-byte vector.
__device__ __forceinline__ void k_scale_min(const uint4& header, int j, int& scale, int& min) {
  auto s = [&](int i) { return byte_at(header, 4 + i); };
  if (j < 4) {
    scale = s(j) & 63;
    min = s(j + 4) & 63;
  } else {
    scale = (s(j + 4) & 0x0f) | ((s(j - 4) >> 6) << 4);
    min = (s(j + 4) >> 4) | ((s(j) >> 6) << 4);
  }
}

// Q4_K planes: qs[128] | (d, dmin, scales[12]); Q5_K: qs[128] | qh[32] | header.
// x = d*sc*q - dmin*mn per 32-element sub-block. Unit k of a super-block is
// qs bytes 16k..16k+15: pair c = k/2, lanes l in [16h, 16h + 16) for h = k%2,
// low nibbles in sub-block 2c, high nibbles in 2c+1.
template <bool kFifthBit>
struct FormatQ45_K {
  static constexpr TensorType kType = kFifthBit ? TensorType::Q5_K : TensorType::Q4_K;
  static constexpr int kUnitElems = 32, kUnroll = 1;
  static constexpr bool kQ8 = true;
  static constexpr int kHeaderPlane = kFifthBit ? 2 : 1;
  struct Regs { uint4 q, qh, header; };
  static __device__ Regs load(const DeviceMatrix& m, int64_t row, int unit) {
    const int64_t u = row * (m.cols / 32) + unit, sb = u / 8;
    Regs r;
    r.q = load_stream16(m.plane[0] + u * 16);
    if constexpr (kFifthBit) r.qh = load_stream16(m.plane[1] + sb * 32 + 16 * (unit % 2));
    r.header = load_stream16(m.plane[kHeaderPlane] + sb * 16);
    return r;
  }
  static __device__ float dot(const Regs& r, const int8_t* xq_row, const float2* xds_row, int unit) {
    const int k = unit % 8, c = k / 2, h = k % 2;
    const int base = (unit / 8) * 256 + 64 * c + 16 * h;
    const int4 xl = load_int4(xq_row + base), xh = load_int4(xq_row + base + 32);
    const int xl_w[4] = {xl.x, xl.y, xl.z, xl.w}, xh_w[4] = {xh.x, xh.y, xh.z, xh.w};
    int sum_lo = 0, sum_hi = 0;
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const uint32_t q = uint32_t(word_at(r.q, w));
      int lo = int(q & kLowNibbles), hi = int((q >> 4) & kLowNibbles);
      if constexpr (kFifthBit) {
        const uint32_t hb = uint32_t(word_at(r.qh, w));
        lo |= int(((hb >> (2 * c)) & 0x01010101u) << 4);
        hi |= int(((hb >> (2 * c + 1)) & 0x01010101u) << 4);
      }
      sum_lo = __dp4a(lo, xl_w[w], sum_lo);
      sum_hi = __dp4a(hi, xh_w[w], sum_hi);
    }
    uint32_t scales, mins;
    k_scale_min_pair(r.header, c, scales, mins);
    const float2 dm = __half22float2(*reinterpret_cast<const __half2*>(&r.header.x));  // (d, dmin)
    // (d, d * sum q) of the activation blocks under sub-blocks 2c and 2c + 1.
    const float4 xs = __ldg(reinterpret_cast<const float4*>(xds_row + (unit / 8) * 8 + 2 * c));
    float v = dm.x * (small_int_to_float(int(scales & 0xff)) * xs.x * small_int_to_float(sum_lo) +
                      small_int_to_float(int(scales >> 8)) * xs.z * small_int_to_float(sum_hi));
    // The min term needs the activation sum of a whole sub-block (x.y): the
    // h = 0 unit adds sub-block 2c's, the h = 1 unit 2c + 1's.
    v -= dm.y * small_int_to_float(int(h ? mins >> 8 : mins & 0xff)) * (h ? xs.w : xs.y);
    return v;
  }
  static __device__ void dequant32(const DeviceMatrix& m, int64_t row, int64_t chunk, float* out) {
    const int64_t sb = row * (m.cols / 256) + chunk / 8;
    const int j = int(chunk % 8), pair = j / 2, nibble = j % 2;
    const uint8_t* qs = m.plane[0] + sb * 128 + 32 * pair;
    const uint8_t* qh = m.plane[1] + sb * 32;
    const uint4 header = *reinterpret_cast<const uint4*>(m.plane[kHeaderPlane] + sb * 16);
    int sc, mn;
    k_scale_min(header, j, sc, mn);
    const float scale = mul(half_to_float(uint16_t(header.x & 0xffff)), float(sc));
    const float min = mul(half_to_float(uint16_t(header.x >> 16)), float(mn));
    for (int l = 0; l < 32; ++l) {
      int q = (qs[l] >> (4 * nibble)) & 15;
      if constexpr (kFifthBit) q |= ((qh[l] >> j) & 1) << 4;
      out[l] = sub(mul(scale, float(q)), min);
    }
  }
};
using FormatQ4_K = FormatQ45_K<false>;
using FormatQ5_K = FormatQ45_K<true>;

// Unsigned bytes of a times signed bytes of b, summed into c.
__device__ __forceinline__ int dp4a_us(uint32_t a, int b, int c) {
  int d;
  asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// Q4_K with 32-byte units: unit k (0..3) of a super-block is qs bytes
// 32k..32k+31, low nibbles sub-block 2k, high nibbles 2k + 1, so a lane
// decodes one scale pair and one min pair per 32 bytes, and dots the high
// nibbles in place (16x their value, as unsigned bytes) and scales the sum
// down, which saves a shift per word. 39% fewer instructions than
// FormatQ4_K's 16-byte units (ncu, H200); the gated decode mat-vec, which
// issues about 2 instructions per clock, runs 7% faster with them, while the
// latency-bound short rows (Q/K/V, wo) lose (bench/cuda_NOTES.md). No dequant32:
// only that mat-vec uses it.
struct FormatQ4_KPair {
  static constexpr TensorType kType = TensorType::Q4_K;
  static constexpr int kUnitElems = 64, kUnroll = 1;
  static constexpr bool kQ8 = true;
  struct Regs { uint4 q[2], header; };
  static __device__ Regs load(const DeviceMatrix& m, int64_t row, int unit) {
    const int64_t u = row * (m.cols / 64) + unit, sb = u / 4;
    Regs r;
    r.q[0] = load_l1_16(m.plane[0] + u * 32);
    r.q[1] = load_l1_16(m.plane[0] + u * 32 + 16);
    r.header = load_stream16(m.plane[1] + sb * 16);
    return r;
  }
  static __device__ float dot(const Regs& r, const int8_t* xq_row, const float2* xds_row, int unit) {
    const int c = unit % 4;
    const int8_t* x = xq_row + (unit / 4) * 256 + 64 * c;
    int sum_lo = 0, sum_hi = 0;  // sum_hi is 16x the high nibbles' sum
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int4 xl = load_int4(x + 16 * h), xh = load_int4(x + 32 + 16 * h);
      const int xl_w[4] = {xl.x, xl.y, xl.z, xl.w}, xh_w[4] = {xh.x, xh.y, xh.z, xh.w};
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        const uint32_t q = uint32_t(word_at(r.q[h], w));
        sum_lo = __dp4a(int(q & kLowNibbles), xl_w[w], sum_lo);
        sum_hi = dp4a_us(q & ~kLowNibbles, xh_w[w], sum_hi);
      }
    }
    sum_hi >>= 4;  // exact: every term was a multiple of 16
    uint32_t scales, mins;
    k_scale_min_pair(r.header, c, scales, mins);
    const float2 dm = __half22float2(*reinterpret_cast<const __half2*>(&r.header.x));  // (d, dmin)
    // (d, d * sum q) of the activation blocks under sub-blocks 2c and 2c + 1.
    const float4 xs = __ldg(reinterpret_cast<const float4*>(xds_row + (unit / 4) * 8 + 2 * c));
    // |scale * sum| <= 63 * 15 * 127 * 32 < 2^22: exact through the mantissa trick.
    const float lo = small_int_to_float(int(scales & 0xff) * sum_lo);
    const float hi = small_int_to_float(int(scales >> 8) * sum_hi);
    const float mn = small_int_to_float(int(mins & 0xff)) * xs.y + small_int_to_float(int(mins >> 8)) * xs.w;
    return dm.x * (lo * xs.x + hi * xs.z) - dm.y * mn;
  }
};

// Q6_K planes: ql[128] | qh[64] | scales[16] (int8) | d. x = d*sc*(q - 32).
// Unit k: ql bytes 16k..16k+15 = (c, a, b) = (k/4, (k/2)%2, k%2), lanes
// l in [16b, 16b + 16); low nibbles are group j = a, high nibbles j = a + 2;
// the two high bits come from qh bytes 32c + l.
struct FormatQ6_K {
  static constexpr TensorType kType = TensorType::Q6_K;
  static constexpr int kUnitElems = 32, kUnroll = 1;
  static constexpr bool kQ8 = true;
  struct Regs { uint4 ql, qh, scales; uint32_t d; };
  static __device__ Regs load(const DeviceMatrix& m, int64_t row, int unit) {
    const int64_t u = row * (m.cols / 32) + unit, sb = u / 8;
    const int k = unit % 8;
    Regs r;
    r.ql = load_stream16(m.plane[0] + u * 16);
    r.qh = load_stream16(m.plane[1] + sb * 64 + 32 * (k / 4) + 16 * (k % 2));
    r.scales = load_stream16(m.plane[2] + sb * 16);
    r.d = __ldg(reinterpret_cast<const uint16_t*>(m.plane[3] + sb * 2));
    return r;
  }
  static __device__ float dot(const Regs& r, const int8_t* xq_row, const float2* xds_row, int unit) {
    const int k = unit % 8, c = k / 4, a = (k / 2) % 2, b = k % 2;
    const int base = (unit / 8) * 256 + 128 * c + 32 * a + 16 * b;
    const int4 xl = load_int4(xq_row + base), xh = load_int4(xq_row + base + 64);
    const int xl_w[4] = {xl.x, xl.y, xl.z, xl.w}, xh_w[4] = {xh.x, xh.y, xh.z, xh.w};
    int sum_lo = 0, sum_hi = 0;
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const uint32_t q = uint32_t(word_at(r.ql, w)), hb = uint32_t(word_at(r.qh, w));
      const uint32_t lo = (q & kLowNibbles) | (((hb >> (2 * a)) & 0x03030303u) << 4);
      const uint32_t hi = ((q >> 4) & kLowNibbles) | (((hb >> (2 * a + 4)) & 0x03030303u) << 4);
      sum_lo = __dp4a(int(__vsub4(lo, 0x20202020u)), xl_w[w], sum_lo);
      sum_hi = __dp4a(int(__vsub4(hi, 0x20202020u)), xh_w[w], sum_hi);
    }
    // Scales 8c + k%4 (low nibbles) and 8c + 4 + k%4 (high): byte k%4 of words 2c and 2c + 1.
    const uint32_t w_lo = c ? r.scales.z : r.scales.x, w_hi = c ? r.scales.w : r.scales.y;
    const int byte_shift = 24 - 8 * (k & 3);
    const int s_lo = int(w_lo << byte_shift) >> 24, s_hi = int(w_hi << byte_shift) >> 24;
    const float2 x_lo = __ldg(xds_row + (unit / 8) * 8 + 4 * c + a), x_hi = __ldg(xds_row + (unit / 8) * 8 + 4 * c + a + 2);
    return half_to_float(uint16_t(r.d)) * (small_int_to_float(s_lo) * x_lo.x * small_int_to_float(sum_lo) +
                                           small_int_to_float(s_hi) * x_hi.x * small_int_to_float(sum_hi));
  }
  static __device__ void dequant32(const DeviceMatrix& m, int64_t row, int64_t chunk, float* out) {
    const int64_t sb = row * (m.cols / 256) + chunk / 8;
    const uint8_t* ql = m.plane[0] + sb * 128;
    const uint8_t* qh = m.plane[1] + sb * 64;
    const int8_t* scales = reinterpret_cast<const int8_t*>(m.plane[2] + sb * 16);
    const float d = half_to_float(*reinterpret_cast<const uint16_t*>(m.plane[3] + sb * 2));
    const int e0 = int(chunk % 8) * 32, c = e0 / 128, j = (e0 % 128) / 32;
    for (int l = 0; l < 32; ++l) {
      const int low = (ql[64 * c + 32 * (j % 2) + l] >> (4 * (j / 2))) & 15;
      const int high = (qh[32 * c + l] >> (2 * j)) & 3;
      out[l] = mul(mul(d, float(scales[(e0 + l) / 16])), float((low | high << 4) - 32));
    }
  }
};

// Q2_K (planes qs[64] | scales[16] | (d, dmin)) and Q3_K (planes qs[64] |
// hmask[32] | (scales[12], d)): 2-bit codes, 16-element scale groups. Unit k:
// qs bytes 16k..16k+15 = (c, b) = (k/2, k%2), lanes l in [16b, 16b + 16),
// bits 2j for j = 0..3: 64 elements in four groups s = 8c + 2j + b.
struct FormatQ2_K {
  static constexpr TensorType kType = TensorType::Q2_K;
  static constexpr int kUnitElems = 64, kUnroll = 2;
  static constexpr bool kQ8 = true;
  struct Regs { uint4 q, scales; uint32_t dm; };
  static __device__ Regs load(const DeviceMatrix& m, int64_t row, int unit) {
    const int64_t u = row * (m.cols / 64) + unit, sb = u / 4;
    return {load_stream16(m.plane[0] + u * 16), load_stream16(m.plane[1] + sb * 16),
            __ldg(reinterpret_cast<const uint32_t*>(m.plane[2] + sb * 4))};
  }
  static __device__ float dot(const Regs& r, const int8_t* xq_row, const float2* xds_row, int unit) {
    const int k = unit % 4, c = k / 2, b = k % 2;
    const int base = (unit / 4) * 256 + 128 * c + 16 * b;
    const float d = half_to_float(uint16_t(r.dm & 0xffff)), dmin = half_to_float(uint16_t(r.dm >> 16));
    float total = 0.0f;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int4 x = load_int4(xq_row + base + 32 * j);
      const int xw[4] = {x.x, x.y, x.z, x.w};
      int sum_q = 0, sum_x = 0;
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        sum_q = __dp4a(int((uint32_t(word_at(r.q, w)) >> (2 * j)) & 0x03030303u), xw[w], sum_q);
        sum_x = __dp4a(0x01010101, xw[w], sum_x);
      }
      const int sc = byte_at(r.scales, 8 * c + 2 * j + b);
      total += __ldg(xds_row + (unit / 4) * 8 + 4 * c + j).x *
               (d * float(sc & 15) * float(sum_q) - dmin * float(sc >> 4) * float(sum_x));
    }
    return total;
  }
  static __device__ void dequant32(const DeviceMatrix& m, int64_t row, int64_t chunk, float* out) {
    const int64_t sb = row * (m.cols / 256) + chunk / 8;
    const uint8_t* qs = m.plane[0] + sb * 64;
    const uint8_t* scales = m.plane[1] + sb * 16;
    const uint32_t dm = *reinterpret_cast<const uint32_t*>(m.plane[2] + sb * 4);
    const float d = half_to_float(uint16_t(dm & 0xffff)), dmin = half_to_float(uint16_t(dm >> 16));
    const int e0 = int(chunk % 8) * 32, c = e0 / 128, j = (e0 % 128) / 32;
    for (int l = 0; l < 32; ++l) {
      const int sc = scales[(e0 + l) / 16];
      const int q = (qs[32 * c + l] >> (2 * j)) & 3;
      out[l] = sub(mul(mul(d, float(sc & 15)), float(q)), mul(dmin, float(sc >> 4)));
    }
  }
};

// Q3_K: a clear hmask bit (byte l, bit 4c + j) means the code is 4 below its
// two low bits; sixteen 6-bit scales (stored + 32) packed in 12 bytes.
struct FormatQ3_K {
  static constexpr TensorType kType = TensorType::Q3_K;
  static constexpr int kUnitElems = 64, kUnroll = 2;
  static constexpr bool kQ8 = true;
  struct Regs { uint4 q, hmask, meta; };
  static __device__ int scale(const uint4& meta, int s) {
    const int low = (byte_at(meta, s % 8) >> (4 * (s / 8))) & 15;
    const int high = (byte_at(meta, 8 + s % 4) >> (2 * (s / 4))) & 3;
    return (low | high << 4) - 32;
  }
  static __device__ Regs load(const DeviceMatrix& m, int64_t row, int unit) {
    const int64_t u = row * (m.cols / 64) + unit, sb = u / 4;
    return {load_stream16(m.plane[0] + u * 16), load_stream16(m.plane[1] + sb * 32 + 16 * (unit % 2)),
            load_stream16(m.plane[2] + sb * 16)};
  }
  static __device__ float dot(const Regs& r, const int8_t* xq_row, const float2* xds_row, int unit) {
    const int k = unit % 4, c = k / 2, b = k % 2;
    const int base = (unit / 4) * 256 + 128 * c + 16 * b;
    float total = 0.0f;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int4 x = load_int4(xq_row + base + 32 * j);
      const int xw[4] = {x.x, x.y, x.z, x.w};
      int sum = 0;
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        const uint32_t low = (uint32_t(word_at(r.q, w)) >> (2 * j)) & 0x03030303u;
        const uint32_t missing_high = ((uint32_t(word_at(r.hmask, w)) >> (4 * c + j)) & 0x01010101u) ^ 0x01010101u;
        sum = __dp4a(int(__vsub4(low, missing_high << 2)), xw[w], sum);
      }
      total += __ldg(xds_row + (unit / 4) * 8 + 4 * c + j).x * float(scale(r.meta, 8 * c + 2 * j + b)) * float(sum);
    }
    return half_to_float(uint16_t(r.meta.w & 0xffff)) * total;
  }
  static __device__ void dequant32(const DeviceMatrix& m, int64_t row, int64_t chunk, float* out) {
    const int64_t sb = row * (m.cols / 256) + chunk / 8;
    const uint8_t* qs = m.plane[0] + sb * 64;
    const uint8_t* hmask = m.plane[1] + sb * 32;
    const uint4 meta = *reinterpret_cast<const uint4*>(m.plane[2] + sb * 16);
    const float d = half_to_float(uint16_t(meta.w & 0xffff));
    const int e0 = int(chunk % 8) * 32, c = e0 / 128, j = (e0 % 128) / 32;
    for (int l = 0; l < 32; ++l) {
      const int e = e0 + l;
      const int q = ((qs[32 * c + l] >> (2 * j)) & 3) - (((hmask[l] >> (e / 32)) & 1) ? 0 : 4);
      out[l] = mul(mul(d, float(scale(meta, e / 16))), float(q));
    }
  }
};

// Calls f(Format{}) for the format of `type`; the caller has validated it
// through weight_layout().
template <typename F>
void dispatch_format(TensorType type, F&& f) {
  switch (type) {
    case TensorType::F32: f(FormatF32{}); break;
    case TensorType::F16: f(FormatF16{}); break;
    case TensorType::BF16: f(FormatBF16{}); break;
    case TensorType::Q4_0: f(FormatQ4_0{}); break;
    case TensorType::Q4_1: f(FormatQ4_1{}); break;
    case TensorType::Q5_0: f(FormatQ5_0{}); break;
    case TensorType::Q5_1: f(FormatQ5_1{}); break;
    case TensorType::Q8_0: f(FormatQ8_0{}); break;
    case TensorType::MXFP4: f(FormatMXFP4{}); break;
    case TensorType::Q2_K: f(FormatQ2_K{}); break;
    case TensorType::Q3_K: f(FormatQ3_K{}); break;
    case TensorType::Q4_K: f(FormatQ4_K{}); break;
    case TensorType::Q5_K: f(FormatQ5_K{}); break;
    case TensorType::Q6_K: f(FormatQ6_K{}); break;
    default: weight_layout(type);  // throws naming the type
  }
}

}  // namespace nt::cuda

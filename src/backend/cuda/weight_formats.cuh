// Device-side decoding of every weight format, in the plane layout of
// device_matrix.h. Each format is a struct the kernels are templated on:
//
//   kUnitElems  elements one lane decodes per step of a mat-vec row
//   kUnroll     steps whose loads a lane issues before using any (bytes in flight)
//   kQ8         true: dot() takes q8 activations (int8 + per-32 (d, d*sum q)) and
//               uses dp4a; false: dot() takes float activations
//   Regs        the raw bytes of one unit, loaded by load(), used by dot()
//   dequant32   32 consecutive elements (chunk c of a row) as floats, computed
//               with the same float operations as quant/quant.h's reference
//
// Quantized units apply block scales after the integer dot product.
#pragma once

#include "backend/cuda/device_matrix.h"
#include "backend/cuda/device_util.cuh"

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
  static constexpr int kUnitElems = 4, kUnroll = 4;
  static constexpr bool kQ8 = false;
  struct Regs { uint4 w; };
  static __device__ Regs load(const DeviceMatrix& m, int64_t row, int unit) {
    return {load_stream16(m.plane[0] + (row * m.cols + int64_t(unit) * 4) * 4)};
  }
  static __device__ float dot(const Regs& r, const float* x) {
    const float4 a = __ldg(reinterpret_cast<const float4*>(x));
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
  static constexpr int kUnitElems = 8, kUnroll = 4;
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
  static __device__ float dot(const Regs& r, const float* x) {
    const float4 a = __ldg(reinterpret_cast<const float4*>(x));
    const float4 b = __ldg(reinterpret_cast<const float4*>(x) + 1);
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

// Q4_0: x = (q - 8) d. Q4_1: x = q d + m. Q5_*: q gains a fifth bit from qh
// (and Q5_0 subtracts 16). Byte i of qs holds element i (low nibble) and 16+i.
template <bool kFifthBit, bool kMin>
struct FormatLegacy4 {
  static constexpr int kUnitElems = 32, kUnroll = 4;
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
  static __device__ float dot(const Regs& r, const int8_t* xq, const float2* xds) {
    const int4 xa = load_int4(xq), xb = load_int4(xq + 16);
    const int lo_x[4] = {xa.x, xa.y, xa.z, xa.w}, hi_x[4] = {xb.x, xb.y, xb.z, xb.w};
    int sum = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uint32_t q = uint32_t(word_at(r.q, k));
      int lo = int(q & kLowNibbles), hi = int((q >> 4) & kLowNibbles);
      if constexpr (kFifthBit) {
        lo |= fifth_bits(r.qh >> (4 * k));
        hi |= fifth_bits(r.qh >> (16 + 4 * k));
      }
      sum = __dp4a(lo, lo_x[k], sum);
      sum = __dp4a(hi, hi_x[k], sum);
    }
    const float2 xd = __ldg(xds);
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

// Q8_0: x = q d. planes: qs[32] | d
struct FormatQ8_0 {
  static constexpr int kUnitElems = 32, kUnroll = 4;
  static constexpr bool kQ8 = true;
  struct Regs { uint4 q0, q1; uint32_t d; };
  static __device__ Regs load(const DeviceMatrix& m, int64_t row, int unit) {
    const int64_t b = row * (m.cols / 32) + unit;
    const uint8_t* q = plane_record(m, 0, b, 32);
    return {load_stream16(q), load_stream16(q + 16), __ldg(reinterpret_cast<const uint16_t*>(plane_record(m, 1, b, 2)))};
  }
  static __device__ float dot(const Regs& r, const int8_t* xq, const float2* xds) {
    const int4 xa = load_int4(xq), xb = load_int4(xq + 16);
    int sum = __dp4a(int(r.q0.x), xa.x, 0);
    sum = __dp4a(int(r.q0.y), xa.y, sum);
    sum = __dp4a(int(r.q0.z), xa.z, sum);
    sum = __dp4a(int(r.q0.w), xa.w, sum);
    sum = __dp4a(int(r.q1.x), xb.x, sum);
    sum = __dp4a(int(r.q1.y), xb.y, sum);
    sum = __dp4a(int(r.q1.z), xb.z, sum);
    sum = __dp4a(int(r.q1.w), xb.w, sum);
    return half_to_float(uint16_t(r.d)) * __ldg(xds).x * float(sum);
  }
  static __device__ void dequant32(const DeviceMatrix& m, int64_t row, int64_t chunk, float* out) {
    const Regs r = load(m, row, int(chunk));
    const float d = half_to_float(uint16_t(r.d));
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      out[i] = mul(float(int8_t(byte_at(r.q0, i))), d);
      out[i + 16] = mul(float(int8_t(byte_at(r.q1, i))), d);
    }
  }
};

// ---------------------------------------------------------------- K-quants (256-element super-blocks)

// Q4_K/Q5_K six-bit scale and min of sub-block j from the 12 packed bytes at
// header bytes 4..15 (header = d, dmin, scales).
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

// Q4_K (file layout, 144 bytes: d, dmin, scales[12], qs[128]) and Q5_K (176
// bytes: the same header, qh[32], qs[128]). x = d*sc*q - dmin*mn per 32-element
// sub-block j; sub-blocks 2c and 2c+1 share qs bytes 32c..32c+31 (low and high
// nibbles); the fifth bit of element 32j+l is bit j of qh byte l.
// A unit is one such pair c: 64 elements.
template <bool kFifthBit>
struct FormatQ45_K {
  static constexpr int kUnitElems = 64, kUnroll = 2;
  static constexpr bool kQ8 = true;
  static constexpr int kBlockBytes = kFifthBit ? 176 : 144;
  static constexpr int kQsOffset = kFifthBit ? 48 : 16;
  struct Regs { uint4 header, qh0, qh1, q0, q1; int pair; };
  static __device__ const uint8_t* block(const DeviceMatrix& m, int64_t row, int64_t super_block) {
    return m.plane[0] + (row * (m.cols / 256) + super_block) * kBlockBytes;
  }
  static __device__ Regs load(const DeviceMatrix& m, int64_t row, int unit) {
    const uint8_t* b = block(m, row, unit / 4);
    Regs r;
    r.pair = unit % 4;
    r.header = load_stream16(b);
    if constexpr (kFifthBit) {
      r.qh0 = load_stream16(b + 16);
      r.qh1 = load_stream16(b + 32);
    }
    r.q0 = load_stream16(b + kQsOffset + 32 * r.pair);
    r.q1 = load_stream16(b + kQsOffset + 32 * r.pair + 16);
    return r;
  }
  static __device__ float dot(const Regs& r, const int8_t* xq, const float2* xds) {
    int sum_lo = 0, sum_hi = 0;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const uint4 q = half ? r.q1 : r.q0;
      const uint4 h = half ? r.qh1 : r.qh0;
      const int4 xl = load_int4(xq + 16 * half), xh = load_int4(xq + 32 + 16 * half);
      const int xl_w[4] = {xl.x, xl.y, xl.z, xl.w}, xh_w[4] = {xh.x, xh.y, xh.z, xh.w};
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const uint32_t w = uint32_t(word_at(q, k));
        int lo = int(w & kLowNibbles), hi = int((w >> 4) & kLowNibbles);
        if constexpr (kFifthBit) {
          const uint32_t hw = uint32_t(word_at(h, k));
          lo |= int(((hw >> (2 * r.pair)) & 0x01010101u) << 4);
          hi |= int(((hw >> (2 * r.pair + 1)) & 0x01010101u) << 4);
        }
        sum_lo = __dp4a(lo, xl_w[k], sum_lo);
        sum_hi = __dp4a(hi, xh_w[k], sum_hi);
      }
    }
    int sc0, mn0, sc1, mn1;
    k_scale_min(r.header, 2 * r.pair, sc0, mn0);
    k_scale_min(r.header, 2 * r.pair + 1, sc1, mn1);
    const float d = half_to_float(uint16_t(r.header.x & 0xffff)), dmin = half_to_float(uint16_t(r.header.x >> 16));
    const float2 x0 = __ldg(xds), x1 = __ldg(xds + 1);
    return d * (float(sc0) * x0.x * float(sum_lo) + float(sc1) * x1.x * float(sum_hi)) -
           dmin * (float(mn0) * x0.y + float(mn1) * x1.y);
  }
  static __device__ void dequant32(const DeviceMatrix& m, int64_t row, int64_t chunk, float* out) {
    const uint8_t* b = block(m, row, chunk / 8);
    const int j = int(chunk % 8), pair = j / 2, nibble = j % 2;
    const uint4 header = *reinterpret_cast<const uint4*>(b);
    int sc, mn;
    k_scale_min(header, j, sc, mn);
    const float scale = mul(half_to_float(uint16_t(header.x & 0xffff)), float(sc));
    const float min = mul(half_to_float(uint16_t(header.x >> 16)), float(mn));
    for (int l = 0; l < 32; ++l) {
      int q = (b[kQsOffset + 32 * pair + l] >> (4 * nibble)) & 15;
      if constexpr (kFifthBit) q |= ((b[16 + l] >> j) & 1) << 4;
      out[l] = sub(mul(scale, float(q)), min);
    }
  }
};
using FormatQ4_K = FormatQ45_K<false>;
using FormatQ5_K = FormatQ45_K<true>;

// The 128-element half c of a super-block whose codes are 2 bits at
// byte 32c + l, bits 2j (element 128c + 32j + l), as in Q2_K, Q3_K and Q6_K's qh.
// Sub-block (16 elements) s = 8c + 2j + k/4 for word k of lane group j.

// Q2_K planes: (scales[16], qs[64]) | (d, dmin). x = d*(sc & 15)*q - dmin*(sc >> 4).
struct FormatQ2_K {
  static constexpr int kUnitElems = 128, kUnroll = 2;
  static constexpr bool kQ8 = true;
  struct Regs { uint4 q0, q1; uint2 scales; uint32_t dm; };
  static __device__ Regs load(const DeviceMatrix& m, int64_t row, int unit) {
    const int64_t sb = row * (m.cols / 256) + unit / 2;
    const int c = unit % 2;
    const uint8_t* rec = plane_record(m, 0, sb, 80);
    Regs r;
    r.q0 = load_stream16(rec + 16 + 32 * c);
    r.q1 = load_stream16(rec + 32 + 32 * c);
    r.scales = __ldg(reinterpret_cast<const uint2*>(rec + 8 * c));
    r.dm = __ldg(reinterpret_cast<const uint32_t*>(plane_record(m, 1, sb, 4)));
    return r;
  }
  static __device__ float dot(const Regs& r, const int8_t* xq, const float2* xds) {
    const uint32_t qw[8] = {r.q0.x, r.q0.y, r.q0.z, r.q0.w, r.q1.x, r.q1.y, r.q1.z, r.q1.w};
    const float d = half_to_float(uint16_t(r.dm & 0xffff)), dmin = half_to_float(uint16_t(r.dm >> 16));
    float total = 0.0f;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int4 xa = load_int4(xq + 32 * j), xb = load_int4(xq + 32 * j + 16);
      const int xw[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
      float part = 0.0f;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        int sum_q = 0, sum_x = 0;
#pragma unroll
        for (int k = 4 * h; k < 4 * h + 4; ++k) {
          sum_q = __dp4a(int((qw[k] >> (2 * j)) & 0x03030303u), xw[k], sum_q);
          sum_x = __dp4a(0x01010101, xw[k], sum_x);
        }
        const int s = 2 * j + h;
        const int sc = int(((s < 4 ? r.scales.x : r.scales.y) >> (8 * (s & 3))) & 0xff);
        part += d * float(sc & 15) * float(sum_q) - dmin * float(sc >> 4) * float(sum_x);
      }
      total += __ldg(xds + j).x * part;
    }
    return total;
  }
  static __device__ void dequant32(const DeviceMatrix& m, int64_t row, int64_t chunk, float* out) {
    const int64_t sb = row * (m.cols / 256) + chunk / 8;
    const uint8_t* rec = plane_record(m, 0, sb, 80);
    const uint32_t dm = *reinterpret_cast<const uint32_t*>(plane_record(m, 1, sb, 4));
    const float d = half_to_float(uint16_t(dm & 0xffff)), dmin = half_to_float(uint16_t(dm >> 16));
    const int e0 = int(chunk % 8) * 32, c = e0 / 128, j = (e0 % 128) / 32;
    for (int l = 0; l < 32; ++l) {
      const int sc = rec[(e0 + l) / 16];
      const int q = (rec[16 + 32 * c + l] >> (2 * j)) & 3;
      out[l] = sub(mul(mul(d, float(sc & 15)), float(q)), mul(dmin, float(sc >> 4)));
    }
  }
};

// Q3_K planes: (hmask[32], qs[64]) | (scales[12], d, pad). A clear hmask bit
// (byte l, bit e/32) means the code is 4 below its two low bits.
struct FormatQ3_K {
  static constexpr int kUnitElems = 128, kUnroll = 2;
  static constexpr bool kQ8 = true;
  struct Regs { uint4 h0, h1, q0, q1, meta; int c; };
  static __device__ int scale(const uint4& meta, int s) {
    const int low = (byte_at(meta, s % 8) >> (4 * (s / 8))) & 15;
    const int high = (byte_at(meta, 8 + s % 4) >> (2 * (s / 4))) & 3;
    return (low | high << 4) - 32;
  }
  static __device__ Regs load(const DeviceMatrix& m, int64_t row, int unit) {
    const int64_t sb = row * (m.cols / 256) + unit / 2;
    const uint8_t* rec = plane_record(m, 0, sb, 96);
    Regs r;
    r.c = unit % 2;
    r.h0 = load_stream16(rec);
    r.h1 = load_stream16(rec + 16);
    r.q0 = load_stream16(rec + 32 + 32 * r.c);
    r.q1 = load_stream16(rec + 48 + 32 * r.c);
    r.meta = __ldg(reinterpret_cast<const uint4*>(plane_record(m, 1, sb, 16)));
    return r;
  }
  static __device__ float dot(const Regs& r, const int8_t* xq, const float2* xds) {
    const uint32_t qw[8] = {r.q0.x, r.q0.y, r.q0.z, r.q0.w, r.q1.x, r.q1.y, r.q1.z, r.q1.w};
    const uint32_t hw[8] = {r.h0.x, r.h0.y, r.h0.z, r.h0.w, r.h1.x, r.h1.y, r.h1.z, r.h1.w};
    float total = 0.0f;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int4 xa = load_int4(xq + 32 * j), xb = load_int4(xq + 32 * j + 16);
      const int xw[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
      const int shift = 4 * r.c + j;
      float part = 0.0f;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        int sum = 0;
#pragma unroll
        for (int k = 4 * h; k < 4 * h + 4; ++k) {
          const uint32_t low = (qw[k] >> (2 * j)) & 0x03030303u;
          const uint32_t missing_high = ((hw[k] >> shift) & 0x01010101u) ^ 0x01010101u;
          sum = __dp4a(int(__vsub4(low, missing_high << 2)), xw[k], sum);
        }
        part += float(scale(r.meta, 8 * r.c + 2 * j + h)) * float(sum);
      }
      total += __ldg(xds + j).x * part;
    }
    return half_to_float(uint16_t(r.meta.w & 0xffff)) * total;
  }
  static __device__ void dequant32(const DeviceMatrix& m, int64_t row, int64_t chunk, float* out) {
    const int64_t sb = row * (m.cols / 256) + chunk / 8;
    const uint8_t* rec = plane_record(m, 0, sb, 96);
    const uint4 meta = *reinterpret_cast<const uint4*>(plane_record(m, 1, sb, 16));
    const float d = half_to_float(uint16_t(meta.w & 0xffff));
    const int e0 = int(chunk % 8) * 32, c = e0 / 128, j = (e0 % 128) / 32;
    for (int l = 0; l < 32; ++l) {
      const int e = e0 + l;
      const int q = ((rec[32 + 32 * c + l] >> (2 * j)) & 3) - (((rec[l] >> (e / 32)) & 1) ? 0 : 4);
      out[l] = mul(mul(d, float(scale(meta, e / 16))), float(q));
    }
  }
};

// Q6_K planes: (ql[128], qh[64]) | scales[16] (int8) | d. Element
// e = 128c + 32j + l has its low nibble in ql byte 64c + 32(j%2) + l (nibble
// j/2) and two high bits in qh byte 32c + l (bits 2j); x = d*sc*(q - 32).
struct FormatQ6_K {
  static constexpr int kUnitElems = 128, kUnroll = 1;
  static constexpr bool kQ8 = true;
  struct Regs { uint4 ql[4], qh[2]; uint2 scales; uint32_t d; };
  static __device__ Regs load(const DeviceMatrix& m, int64_t row, int unit) {
    const int64_t sb = row * (m.cols / 256) + unit / 2;
    const int c = unit % 2;
    const uint8_t* rec = plane_record(m, 0, sb, 192);
    Regs r;
#pragma unroll
    for (int i = 0; i < 4; ++i) r.ql[i] = load_stream16(rec + 64 * c + 16 * i);
    r.qh[0] = load_stream16(rec + 128 + 32 * c);
    r.qh[1] = load_stream16(rec + 144 + 32 * c);
    r.scales = __ldg(reinterpret_cast<const uint2*>(plane_record(m, 1, sb, 16) + 8 * c));
    r.d = __ldg(reinterpret_cast<const uint16_t*>(plane_record(m, 2, sb, 2)));
    return r;
  }
  static __device__ float dot(const Regs& r, const int8_t* xq, const float2* xds) {
    const uint32_t hw[8] = {r.qh[0].x, r.qh[0].y, r.qh[0].z, r.qh[0].w, r.qh[1].x, r.qh[1].y, r.qh[1].z, r.qh[1].w};
    float total = 0.0f;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int4 xa = load_int4(xq + 32 * j), xb = load_int4(xq + 32 * j + 16);
      const int xw[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
      const uint4 l0 = r.ql[2 * (j % 2)], l1 = r.ql[2 * (j % 2) + 1];
      const uint32_t lw[8] = {l0.x, l0.y, l0.z, l0.w, l1.x, l1.y, l1.z, l1.w};
      float part = 0.0f;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        int sum = 0;
#pragma unroll
        for (int k = 4 * h; k < 4 * h + 4; ++k) {
          const uint32_t low = (lw[k] >> (4 * (j / 2))) & kLowNibbles;
          const uint32_t high = ((hw[k] >> (2 * j)) & 0x03030303u) << 4;
          sum = __dp4a(int(__vsub4(low | high, 0x20202020u)), xw[k], sum);
        }
        const int s = 2 * j + h;
        const int sc = int(int8_t(((s < 4 ? r.scales.x : r.scales.y) >> (8 * (s & 3))) & 0xff));
        part += float(sc) * float(sum);
      }
      total += __ldg(xds + j).x * part;
    }
    return half_to_float(uint16_t(r.d)) * total;
  }
  static __device__ void dequant32(const DeviceMatrix& m, int64_t row, int64_t chunk, float* out) {
    const int64_t sb = row * (m.cols / 256) + chunk / 8;
    const uint8_t* rec = plane_record(m, 0, sb, 192);
    const int8_t* scales = reinterpret_cast<const int8_t*>(plane_record(m, 1, sb, 16));
    const float d = half_to_float(*reinterpret_cast<const uint16_t*>(plane_record(m, 2, sb, 2)));
    const int e0 = int(chunk % 8) * 32, c = e0 / 128, j = (e0 % 128) / 32;
    for (int l = 0; l < 32; ++l) {
      const int low = (rec[64 * c + 32 * (j % 2) + l] >> (4 * (j / 2))) & 15;
      const int high = (rec[128 + 32 * c + l] >> (2 * j)) & 3;
      out[l] = mul(mul(d, float(scales[(e0 + l) / 16])), float((low | high << 4) - 32));
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
    case TensorType::Q2_K: f(FormatQ2_K{}); break;
    case TensorType::Q3_K: f(FormatQ3_K{}); break;
    case TensorType::Q4_K: f(FormatQ4_K{}); break;
    case TensorType::Q5_K: f(FormatQ5_K{}); break;
    case TensorType::Q6_K: f(FormatQ6_K{}); break;
    default: weight_layout(type);  // throws naming the type
  }
}

}  // namespace nt::cuda

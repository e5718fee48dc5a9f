// Legacy 32-element formats. The encoders reproduce gguf-py's
// (gguf.quants) arithmetic step by step in float32, so their bytes match it
// exactly:
//  - Q4_0/Q5_0 take d from the element of largest magnitude *with its sign*
//    (the first one on ties), divided by -8 / -16, so that element lands on
//    the most negative code; codes are trunc(x / d + 8.5) (resp. 16.5), i.e.
//    round half up, clamped to the top code.
//  - Q4_1/Q5_1 use d = (max - min) / 15 (resp. 31) and trunc((x - min) / d + 0.5),
//    with the unrounded float32 min; the stored min is its fp16 rounding.
//  - Q8_0 uses d = max|x| / 127 and rounds half away from zero (roundf).
//  - In every case the element is multiplied by the float32 reciprocal 1/d
//    (0 when d is 0), never divided by d.
// Bit-exactness also needs x * (1/d) + 8.5 rounded twice, not fused into one
// FMA, which GCC does by default when the target has FMA (-march=native), so
// contraction is switched off for this file. (The decoders are immune: an fp16
// scale times a code of at most 6 bits is exact in float32.)
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/half.h"
#include "quant/blocks.h"
#include "quant/quant_formats.h"

namespace nt::formats {
namespace {

constexpr int kHalf = kQK / 2;

float reciprocal_or_zero(float d) { return d == 0.0f ? 0.0f : 1.0f / d; }

// The element of largest magnitude, keeping its sign; the first one wins ties
// (numpy's argmax), so an all-zero block keeps the sign of its first zero.
float signed_absmax(const float* x) {
  float best = x[0];
  for (int j = 1; j < kQK; ++j) {
    if (std::fabs(x[j]) > std::fabs(best)) best = x[j];
  }
  return best;
}

void min_max(const float* x, float& lo, float& hi) {
  lo = hi = x[0];
  for (int j = 1; j < kQK; ++j) {
    lo = std::min(lo, x[j]);
    hi = std::max(hi, x[j]);
  }
}

// Low nibbles hold elements 0..15, high nibbles 16..31.
void pack_nibbles(const uint8_t* q, uint8_t* qs) {
  for (int j = 0; j < kHalf; ++j) qs[j] = uint8_t((q[j] & 0x0f) | ((q[j + kHalf] & 0x0f) << 4));
}

// Bit j of the little-endian 32-bit word is the fifth bit of element j.
void pack_fifth_bits(const uint8_t* q, uint8_t* qh) {
  uint32_t bits = 0;
  for (int j = 0; j < kQK; ++j) bits |= uint32_t((q[j] >> 4) & 1) << j;
  for (int b = 0; b < 4; ++b) qh[b] = uint8_t(bits >> (8 * b));
}

uint32_t load_fifth_bits(const uint8_t* qh) {
  return uint32_t(qh[0]) | uint32_t(qh[1]) << 8 | uint32_t(qh[2]) << 16 | uint32_t(qh[3]) << 24;
}

// Codes of element j (0..31) from the nibbles and optional fifth bits.
int nibble(const uint8_t* qs, int j) { return j < kHalf ? qs[j] & 0x0f : qs[j - kHalf] >> 4; }

}  // namespace

void quantize_q4_0(const float* src, void* dst, int64_t n_blocks, const float*) {
  auto* out = static_cast<BlockQ4_0*>(dst);
  for (int64_t b = 0; b < n_blocks; ++b, src += kQK) {
    const float d = signed_absmax(src) / -8;
    const float id = reciprocal_or_zero(d);
    uint8_t q[kQK];
    for (int j = 0; j < kQK; ++j) q[j] = uint8_t(std::min(15, int(src[j] * id + 8.5f)));
    out[b].d = fp32_to_fp16(d);
    pack_nibbles(q, out[b].qs);
  }
}

void quantize_q4_1(const float* src, void* dst, int64_t n_blocks, const float*) {
  auto* out = static_cast<BlockQ4_1*>(dst);
  for (int64_t b = 0; b < n_blocks; ++b, src += kQK) {
    float lo, hi;
    min_max(src, lo, hi);
    const float d = (hi - lo) / 15;
    const float id = reciprocal_or_zero(d);
    uint8_t q[kQK];
    for (int j = 0; j < kQK; ++j) q[j] = uint8_t(std::min(15, int((src[j] - lo) * id + 0.5f)));
    out[b].d = fp32_to_fp16(d);
    out[b].m = fp32_to_fp16(lo);
    pack_nibbles(q, out[b].qs);
  }
}

void quantize_q5_0(const float* src, void* dst, int64_t n_blocks, const float*) {
  auto* out = static_cast<BlockQ5_0*>(dst);
  for (int64_t b = 0; b < n_blocks; ++b, src += kQK) {
    const float d = signed_absmax(src) / -16;
    const float id = reciprocal_or_zero(d);
    uint8_t q[kQK];
    for (int j = 0; j < kQK; ++j) q[j] = uint8_t(std::min(31, int(src[j] * id + 16.5f)));
    out[b].d = fp32_to_fp16(d);
    pack_fifth_bits(q, out[b].qh);
    pack_nibbles(q, out[b].qs);
  }
}

void quantize_q5_1(const float* src, void* dst, int64_t n_blocks, const float*) {
  auto* out = static_cast<BlockQ5_1*>(dst);
  for (int64_t b = 0; b < n_blocks; ++b, src += kQK) {
    float lo, hi;
    min_max(src, lo, hi);
    const float d = (hi - lo) / 31;
    const float id = reciprocal_or_zero(d);
    uint8_t q[kQK];
    for (int j = 0; j < kQK; ++j) q[j] = uint8_t(std::min(31, int((src[j] - lo) * id + 0.5f)));
    out[b].d = fp32_to_fp16(d);
    out[b].m = fp32_to_fp16(lo);
    pack_fifth_bits(q, out[b].qh);
    pack_nibbles(q, out[b].qs);
  }
}

void quantize_q8_0(const float* src, void* dst, int64_t n_blocks, const float*) {
  auto* out = static_cast<BlockQ8_0*>(dst);
  for (int64_t b = 0; b < n_blocks; ++b, src += kQK) {
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(src[j]));
    const float d = amax / 127;
    const float id = reciprocal_or_zero(d);
    for (int j = 0; j < kQK; ++j) out[b].qs[j] = int8_t(std::round(src[j] * id));
    out[b].d = fp32_to_fp16(d);
  }
}

// Same codes as Q8_0, plus s = d * sum(codes) for the Q4_1/Q5_1 dot products.
void quantize_q8_1(const float* src, void* dst, int64_t n_blocks, const float*) {
  auto* out = static_cast<BlockQ8_1*>(dst);
  for (int64_t b = 0; b < n_blocks; ++b, src += kQK) {
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(src[j]));
    const float d = amax / 127;
    const float id = reciprocal_or_zero(d);
    int sum = 0;
    for (int j = 0; j < kQK; ++j) {
      out[b].qs[j] = int8_t(std::round(src[j] * id));
      sum += out[b].qs[j];
    }
    out[b].d = fp32_to_fp16(d);
    out[b].s = fp32_to_fp16(d * float(sum));
  }
}

void dequantize_q4_0(const void* src, float* dst, int64_t n_blocks) {
  const auto* in = static_cast<const BlockQ4_0*>(src);
  for (int64_t b = 0; b < n_blocks; ++b, dst += kQK) {
    const float d = fp16_to_fp32(in[b].d);
    for (int j = 0; j < kQK; ++j) dst[j] = d * float(nibble(in[b].qs, j) - 8);
  }
}

void dequantize_q4_1(const void* src, float* dst, int64_t n_blocks) {
  const auto* in = static_cast<const BlockQ4_1*>(src);
  for (int64_t b = 0; b < n_blocks; ++b, dst += kQK) {
    const float d = fp16_to_fp32(in[b].d);
    const float m = fp16_to_fp32(in[b].m);
    for (int j = 0; j < kQK; ++j) dst[j] = d * float(nibble(in[b].qs, j)) + m;
  }
}

void dequantize_q5_0(const void* src, float* dst, int64_t n_blocks) {
  const auto* in = static_cast<const BlockQ5_0*>(src);
  for (int64_t b = 0; b < n_blocks; ++b, dst += kQK) {
    const float d = fp16_to_fp32(in[b].d);
    const uint32_t high = load_fifth_bits(in[b].qh);
    for (int j = 0; j < kQK; ++j) {
      const int q = nibble(in[b].qs, j) | int((high >> j) & 1) << 4;
      dst[j] = d * float(q - 16);
    }
  }
}

void dequantize_q5_1(const void* src, float* dst, int64_t n_blocks) {
  const auto* in = static_cast<const BlockQ5_1*>(src);
  for (int64_t b = 0; b < n_blocks; ++b, dst += kQK) {
    const float d = fp16_to_fp32(in[b].d);
    const float m = fp16_to_fp32(in[b].m);
    const uint32_t high = load_fifth_bits(in[b].qh);
    for (int j = 0; j < kQK; ++j) {
      const int q = nibble(in[b].qs, j) | int((high >> j) & 1) << 4;
      dst[j] = d * float(q) + m;
    }
  }
}

void dequantize_q8_0(const void* src, float* dst, int64_t n_blocks) {
  const auto* in = static_cast<const BlockQ8_0*>(src);
  for (int64_t b = 0; b < n_blocks; ++b, dst += kQK) {
    const float d = fp16_to_fp32(in[b].d);
    for (int j = 0; j < kQK; ++j) dst[j] = float(in[b].qs[j]) * d;
  }
}

void dequantize_q8_1(const void* src, float* dst, int64_t n_blocks) {
  const auto* in = static_cast<const BlockQ8_1*>(src);
  for (int64_t b = 0; b < n_blocks; ++b, dst += kQK) {
    const float d = fp16_to_fp32(in[b].d);
    for (int j = 0; j < kQK; ++j) dst[j] = float(in[b].qs[j]) * d;
  }
}

}  // namespace nt::formats

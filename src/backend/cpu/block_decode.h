// Scalar decoding of one quantized block into small unsigned integers plus
// scales: the common ground of the scalar dot products and the GEMM panel
// unpacking. Internal linkage on purpose: the SIMD translation units are
// compiled for other targets and must not share out-of-line copies.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/half.h"
#include "quant/blocks.h"
#include "quant/tensor_type.h"

namespace nt::cpu {
namespace {

// w[i] = d * (q[i] - zero)          (Q4_0, Q5_0, Q8_0 with zero = 8, 16, 0)
// w[i] = d * q[i] + m               (Q4_1, Q5_1 with zero = 0)
// MXFP4 as the first form: its doubled E2M1 values (-12 to 12) plus zero = 12.
struct LegacyBlock {
  uint8_t q[kQK];  // Q8_0: the int8 bits
  float d, m;
  int zero;
};

// The offset that makes MXFP4's values unsigned, as the integer dot products take them.
constexpr int kMxfp4Zero = 12;

inline void decode_nibbles(const uint8_t* qs, uint8_t* q) {
  for (int j = 0; j < 16; ++j) {
    q[j] = qs[j] & 15;
    q[j + 16] = qs[j] >> 4;
  }
}

inline void add_fifth_bits(const uint8_t* qh, uint8_t* q) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  for (int j = 0; j < 32; ++j) q[j] |= ((bits >> j) & 1) << 4;
}

inline void decode_legacy(TensorType type, const void* block, LegacyBlock& out) {
  out.m = 0;
  out.zero = 0;
  switch (type) {
    case TensorType::Q4_0: {
      auto* b = static_cast<const BlockQ4_0*>(block);
      out.d = fp16_to_fp32(b->d);
      out.zero = 8;
      decode_nibbles(b->qs, out.q);
      break;
    }
    case TensorType::Q4_1: {
      auto* b = static_cast<const BlockQ4_1*>(block);
      out.d = fp16_to_fp32(b->d);
      out.m = fp16_to_fp32(b->m);
      decode_nibbles(b->qs, out.q);
      break;
    }
    case TensorType::Q5_0: {
      auto* b = static_cast<const BlockQ5_0*>(block);
      out.d = fp16_to_fp32(b->d);
      out.zero = 16;
      decode_nibbles(b->qs, out.q);
      add_fifth_bits(b->qh, out.q);
      break;
    }
    case TensorType::Q5_1: {
      auto* b = static_cast<const BlockQ5_1*>(block);
      out.d = fp16_to_fp32(b->d);
      out.m = fp16_to_fp32(b->m);
      decode_nibbles(b->qs, out.q);
      add_fifth_bits(b->qh, out.q);
      break;
    }
    case TensorType::MXFP4: {
      auto* b = static_cast<const BlockMXFP4*>(block);
      out.d = mxfp4_scale(b->e);
      out.zero = kMxfp4Zero;
      decode_nibbles(b->qs, out.q);
      for (uint8_t& q : out.q) q = uint8_t(kMxfp4Values[q] + kMxfp4Zero);
      break;
    }
    default: {  // Q8_0
      auto* b = static_cast<const BlockQ8_0*>(block);
      out.d = fp16_to_fp32(b->d);
      std::memcpy(out.q, b->qs, kQK);
      break;
    }
  }
}

// w[i] = d * sc[g] * (q[i] - zero) - dmin * m[g]   for i in 16-element group g.
struct KBlock {
  uint8_t q[kQK_K];
  int sc[kQK_K / 16];
  int m[kQK_K / 16];
  int zero;
  float d, dmin;
};

// The 6-bit scale and min of sub-block j (of 8) in a Q4_K/Q5_K block.
inline void k4_scale_min(const uint8_t* s, int j, int& sc, int& m) {
  if (j < 4) {
    sc = s[j] & 63;
    m = s[j + 4] & 63;
  } else {
    sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
    m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// The signed 6-bit scale of group i (of 16) in a Q3_K block.
inline int k3_scale(const uint8_t* s, int i) {
  const int low = i < 8 ? s[i] & 15 : s[i - 8] >> 4;
  const int high = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
  return (low | (high << 4)) - 32;
}

// Fills the per-32 scale/min pairs of Q4_K/Q5_K into both 16-groups.
inline void k4_scales(const uint8_t* scales, KBlock& out) {
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    k4_scale_min(scales, j, sc, m);
    out.sc[2 * j] = out.sc[2 * j + 1] = sc;
    out.m[2 * j] = out.m[2 * j + 1] = m;
  }
}

inline void decode_k(TensorType type, const void* block, KBlock& out) {
  out.zero = 0;
  out.dmin = 0;
  for (int& m : out.m) m = 0;
  switch (type) {
    case TensorType::Q2_K: {
      auto* b = static_cast<const BlockQ2_K*>(block);
      out.d = fp16_to_fp32(b->d);
      out.dmin = fp16_to_fp32(b->dmin);
      for (int g = 0; g < 16; ++g) {
        out.sc[g] = b->scales[g] & 15;
        out.m[g] = b->scales[g] >> 4;
      }
      for (int e = 0; e < kQK_K; ++e) {  // element 128h + 32j + l lives in qs[32h + l] bits 2j
        const int h = e / 128, j = (e % 128) / 32, l = e % 32;
        out.q[e] = (b->qs[32 * h + l] >> (2 * j)) & 3;
      }
      break;
    }
    case TensorType::Q3_K: {
      auto* b = static_cast<const BlockQ3_K*>(block);
      out.d = fp16_to_fp32(b->d);
      out.zero = 4;
      for (int g = 0; g < 16; ++g) out.sc[g] = k3_scale(b->scales, g);
      for (int e = 0; e < kQK_K; ++e) {
        const int h = e / 128, j = (e % 128) / 32, l = e % 32;
        const int low = (b->qs[32 * h + l] >> (2 * j)) & 3;
        const int high = (b->hmask[l] >> (e / 32)) & 1;
        out.q[e] = uint8_t(low | (high << 2));
      }
      break;
    }
    case TensorType::Q4_K: {
      auto* b = static_cast<const BlockQ4_K*>(block);
      out.d = fp16_to_fp32(b->d);
      out.dmin = fp16_to_fp32(b->dmin);
      k4_scales(b->scales, out);
      for (int e = 0; e < kQK_K; ++e) {  // 64-element chunk c: low nibbles then high nibbles of qs[32c..]
        const int c = e / 64, l = e % 32, high = (e % 64) / 32;
        out.q[e] = (b->qs[32 * c + l] >> (4 * high)) & 15;
      }
      break;
    }
    case TensorType::Q5_K: {
      auto* b = static_cast<const BlockQ5_K*>(block);
      out.d = fp16_to_fp32(b->d);
      out.dmin = fp16_to_fp32(b->dmin);
      k4_scales(b->scales, out);
      for (int e = 0; e < kQK_K; ++e) {
        const int c = e / 64, l = e % 32, high = (e % 64) / 32;
        const int low4 = (b->qs[32 * c + l] >> (4 * high)) & 15;
        const int bit = (b->qh[l] >> (e / 32)) & 1;
        out.q[e] = uint8_t(low4 | (bit << 4));
      }
      break;
    }
    default: {  // Q6_K
      auto* b = static_cast<const BlockQ6_K*>(block);
      out.d = fp16_to_fp32(b->d);
      out.zero = 32;
      for (int g = 0; g < 16; ++g) out.sc[g] = b->scales[g];
      for (int e = 0; e < kQK_K; ++e) {  // 128-element half h; quarter k of it
        const int h = e / 128, k = (e % 128) / 32, l = e % 32;
        const uint8_t* ql = b->ql + 64 * h;
        const int low4 = (ql[l + 32 * (k & 1)] >> (4 * (k >> 1))) & 15;
        const int high2 = (b->qh[32 * h + l] >> (2 * k)) & 3;
        out.q[e] = uint8_t(low4 | (high2 << 4));
      }
      break;
    }
  }
}

inline bool is_k_quant(TensorType type) {
  return type == TensorType::Q2_K || type == TensorType::Q3_K || type == TensorType::Q4_K ||
         type == TensorType::Q5_K || type == TensorType::Q6_K;
}

}  // namespace
}  // namespace nt::cpu

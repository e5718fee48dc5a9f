// Block layouts of the quantized formats, byte for byte as GGUF stores them.
// Scales are IEEE half (uint16_t bits) unless noted.
#pragma once

#include <bit>
#include <cstdint>

#include "quant/tensor_type.h"

namespace nt {

// x = (q - 8) * d; low nibbles hold elements 0..15, high nibbles 16..31.
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQK / 2];
};
// x = q * d + m
struct BlockQ4_1 {
  uint16_t d, m;
  uint8_t qs[kQK / 2];
};
// x = (q - 16) * d; bit j of qh is the fifth bit of element j.
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
struct BlockQ5_1 {
  uint16_t d, m;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
// x = q * d
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK];
};
// Activation format for the Q4_1/Q5_1 dot products: s = d * sum(qs).
struct BlockQ8_1 {
  uint16_t d, s;
  int8_t qs[kQK];
};

// 16 sub-blocks of 16; scales[i] holds a 4-bit scale (low) and 4-bit min (high).
struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];
  uint8_t qs[kQK_K / 4];
  uint16_t d, dmin;
};
// 16 sub-blocks of 16 with 6-bit signed scales packed into 12 bytes; hmask is the third bit.
struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];
  uint8_t qs[kQK_K / 4];
  uint8_t scales[12];
  uint16_t d;
};
// 8 sub-blocks of 32 with 6-bit scales and mins packed into 12 bytes.
struct BlockQ4_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qs[kQK_K / 2];
};
struct BlockQ5_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};
// 16 sub-blocks of 16 with 8-bit signed scales; 4 low bits in ql, 2 high in qh.
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  uint16_t d;
};
// Activation format for the K-quant dot products (float scale, per-16 sums).
struct BlockQ8_K {
  float d;
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];
};

// MXFP4 (OCP microscaling): x = kMxfp4Values[code] * mxfp4_scale(e), codes as
// Q4_0 packs its nibbles (element j low, j + 16 high).
struct BlockMXFP4 {
  uint8_t e;  // E8M0: a bare exponent, 2^(e - 127)
  uint8_t qs[kQK / 2];
};
// The E2M1 values doubled, so that they are integers; mxfp4_scale halves the scale back.
inline constexpr int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
// 2^(e - 128), the E8M0 scale halved; subnormal for e < 2.
inline float mxfp4_scale(uint8_t e) {
  return std::bit_cast<float>(e < 2 ? uint32_t(0x00200000) << e : uint32_t(e - 1) << 23);
}

static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22 &&
              sizeof(BlockQ5_1) == 24 && sizeof(BlockQ8_0) == 34 && sizeof(BlockQ8_1) == 36 && sizeof(BlockMXFP4) == 17);
static_assert(sizeof(BlockQ2_K) == 84 && sizeof(BlockQ3_K) == 110 && sizeof(BlockQ4_K) == 144 &&
              sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210 && sizeof(BlockQ8_K) == 292);

}  // namespace nt

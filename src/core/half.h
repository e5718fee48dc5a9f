// IEEE binary16 and bfloat16 conversions on the CPU, bit-exact with numpy's
// float16 (round to nearest even) and with gguf-py's bf16 rounding.
#pragma once

#include <bit>
#include <cstdint>

namespace nt {

inline float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    int shift = 0;
    while (!(mant & 0x400)) {
      mant <<= 1;
      ++shift;
    }
    mant &= 0x3ff;
    bits = sign | (uint32_t(113 - shift) << 23) | (mant << 13);
  }
  return std::bit_cast<float>(bits);
}

inline uint16_t fp32_to_fp16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000;
  const uint32_t abs = x & 0x7fffffff;
  if (abs >= 0x7f800000u) {  // inf or nan
    return uint16_t(sign | 0x7c00 | (abs > 0x7f800000u ? 0x200 | ((abs >> 13) & 0x3ff) : 0));
  }
  if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00);  // rounds to inf
  if (abs < 0x38800000u) {                                 // subnormal or zero in fp16
    if (abs < 0x33000000u) return uint16_t(sign);           // below half the smallest subnormal
    const uint32_t mant = (abs & 0x7fffff) | 0x800000;
    const int shift = 126 - int(abs >> 23);                  // 14..24
    const uint32_t half_bit = 1u << (shift - 1);
    uint32_t q = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    if (rem > half_bit || (rem == half_bit && (q & 1))) ++q;
    return uint16_t(sign | q);
  }
  uint32_t r = abs - 0x38000000u;  // rebias exponent 127 -> 15
  const uint32_t rem = r & 0x1fff;
  r >>= 13;
  if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) ++r;
  return uint16_t(sign | r);
}

inline float bf16_to_fp32(uint16_t h) { return std::bit_cast<float>(uint32_t(h) << 16); }

// Round to nearest even; NaNs are kept quiet (gguf-py does the same).
inline uint16_t fp32_to_bf16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffff) > 0x7f800000u) return uint16_t((x >> 16) | 64);
  x += 0x7fff + ((x >> 16) & 1);
  return uint16_t(x >> 16);
}

}  // namespace nt

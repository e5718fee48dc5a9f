// K-quant 256-element super-blocks: decoding exactly as gguf-py does (same
// float32 operations in the same order), and encoding by packing the codes and
// scales that kquant_search.cpp chooses.
//
// Element e of a super-block lives at these positions (l = lane):
//  2-bit codes (Q2_K qs, Q3_K qs, Q6_K qh): e = 128*c + 32*j + l  ->  byte 32*c + l, bits 2j..2j+1
//  4-bit codes (Q4_K/Q5_K qs):             e = 64*c + 32*h + l   ->  byte 32*c + l, nibble h
//  4-bit codes (Q6_K ql):                  e = 128*c + 64*h + l  ->  byte 64*c + l, nibble h
//  1-bit codes (Q3_K hmask, Q5_K qh):      e = 32*b + l          ->  byte l, bit b
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/half.h"
#include "quant/blocks.h"
#include "quant/kquant_search.h"
#include "quant/quant_formats.h"

namespace nt::formats {
namespace {

int two_bits(const uint8_t* q, int e) { return (q[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3; }
int one_bit(const uint8_t* q, int e) { return (q[e % 32] >> (e / 32)) & 1; }
int nibble_k(const uint8_t* q, int e) { return (q[32 * (e / 64) + e % 32] >> (4 * ((e % 64) / 32))) & 0x0f; }
int nibble_q6(const uint8_t* q, int e) { return (q[64 * (e / 128) + e % 64] >> (4 * ((e % 128) / 64))) & 0x0f; }

void put_two_bits(uint8_t* q, int e, int v) { q[32 * (e / 128) + e % 32] |= uint8_t((v & 3) << (2 * ((e % 128) / 32))); }
void put_one_bit(uint8_t* q, int e, int v) { q[e % 32] |= uint8_t((v & 1) << (e / 32)); }
void put_nibble_k(uint8_t* q, int e, int v) { q[32 * (e / 64) + e % 32] |= uint8_t((v & 0x0f) << (4 * ((e % 64) / 32))); }
void put_nibble_q6(uint8_t* q, int e, int v) {
  q[64 * (e / 128) + e % 64] |= uint8_t((v & 0x0f) << (4 * ((e % 128) / 64)));
}

// Q4_K/Q5_K: eight 6-bit scales and mins in 12 bytes. Bytes 0-3 hold scales
// 0-3 and bytes 4-7 mins 0-3 in their low 6 bits; scales/mins 4-7 keep their
// low nibbles in bytes 8-11 and their top two bits in the spare bits of 0-7.
void unpack_scale_min(const uint8_t* s, int j, int& scale, int& min) {
  if (j < 4) {
    scale = s[j] & 63;
    min = s[j + 4] & 63;
  } else {
    scale = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
    min = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

void pack_scale_min(const uint8_t* scale, const uint8_t* min, uint8_t* s) {
  for (int j = 0; j < 4; ++j) {
    s[j] = uint8_t(scale[j] | ((scale[j + 4] >> 4) << 6));
    s[j + 4] = uint8_t(min[j] | ((min[j + 4] >> 4) << 6));
    s[j + 8] = uint8_t((scale[j + 4] & 0x0f) | ((min[j + 4] & 0x0f) << 4));
  }
}

// Q3_K: sixteen 6-bit scales (stored +32) in 12 bytes: low nibbles of 0-7 in
// bytes 0-7 (low half) and of 8-15 in bytes 0-7 (high half); the top two bits
// of scale 4k+i sit in byte 8+i, bits 2k..2k+1.
int unpack_q3_scale(const uint8_t* s, int j) {
  const int low = (s[j % 8] >> (4 * (j / 8))) & 0x0f;
  const int high = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
  return (low | high << 4) - 32;
}

void pack_q3_scales(const int8_t* scale, uint8_t* s) {
  std::memset(s, 0, 12);
  for (int j = 0; j < 16; ++j) {
    const int v = scale[j] + 32;
    s[j % 8] |= uint8_t((v & 0x0f) << (4 * (j / 8)));
    s[8 + j % 4] |= uint8_t((v >> 4) << (2 * (j / 4)));
  }
}

constexpr kquant::AffineGeometry kQ2Geometry{16, 3, 15};
constexpr kquant::AffineGeometry kQ4Geometry{32, 15, 63};
constexpr kquant::AffineGeometry kQ5Geometry{32, 31, 63};
constexpr kquant::SymmetricGeometry kQ3Geometry{16, 4, 32};
constexpr kquant::SymmetricGeometry kQ6Geometry{16, 32, 128};

// The scaffolding every K-quant encoder shares: per super-block, weight the
// errors, fit codes and scales with `fit_fn`, and pack them into a zeroed block.
template <typename Block, typename Fit, typename FitFn, typename PackFn>
void quantize_superblocks(const float* src, void* dst, int64_t n_blocks, const float* importance, FitFn fit_fn,
                          PackFn pack) {
  auto* out = static_cast<Block*>(dst);
  for (int64_t b = 0; b < n_blocks; ++b, src += kQK_K) {
    float weight[kQK_K];
    kquant::error_weights(src, importance ? importance + b * kQK_K : nullptr, weight);
    Fit fit;
    fit_fn(src, weight, fit);
    Block& blk = out[b];
    std::memset(&blk, 0, sizeof blk);
    pack(blk, fit);
  }
}

}  // namespace

void dequantize_q2_k(const void* src, float* dst, int64_t n_blocks) {
  const auto* in = static_cast<const BlockQ2_K*>(src);
  for (int64_t b = 0; b < n_blocks; ++b, dst += kQK_K) {
    const float d = fp16_to_fp32(in[b].d);
    const float dmin = fp16_to_fp32(in[b].dmin);
    for (int e = 0; e < kQK_K; ++e) {
      const uint8_t sm = in[b].scales[e / 16];
      const float scale = d * float(sm & 0x0f);
      const float min = dmin * float(sm >> 4);
      dst[e] = scale * float(two_bits(in[b].qs, e)) - min;
    }
  }
}

void dequantize_q3_k(const void* src, float* dst, int64_t n_blocks) {
  const auto* in = static_cast<const BlockQ3_K*>(src);
  for (int64_t b = 0; b < n_blocks; ++b, dst += kQK_K) {
    const float d = fp16_to_fp32(in[b].d);
    for (int e = 0; e < kQK_K; ++e) {
      const float scale = d * float(unpack_q3_scale(in[b].scales, e / 16));
      // A clear hmask bit means the code is 4 below its two low bits.
      const int q = two_bits(in[b].qs, e) - (one_bit(in[b].hmask, e) ? 0 : 4);
      dst[e] = scale * float(q);
    }
  }
}

// Q4_K and Q5_K share everything but the code width: 8 sub-blocks of 32 with
// 6-bit scales and mins, x = d * scale * q - dmin * min.
template <typename Block, typename CodeFn>
void dequantize_affine_k(const void* src, float* dst, int64_t n_blocks, CodeFn code) {
  const auto* in = static_cast<const Block*>(src);
  for (int64_t b = 0; b < n_blocks; ++b, dst += kQK_K) {
    const float d = fp16_to_fp32(in[b].d);
    const float dmin = fp16_to_fp32(in[b].dmin);
    for (int j = 0; j < 8; ++j) {
      int sc, mn;
      unpack_scale_min(in[b].scales, j, sc, mn);
      const float scale = d * float(sc);
      const float min = dmin * float(mn);
      for (int e = 32 * j; e < 32 * j + 32; ++e) dst[e] = scale * float(code(in[b], e)) - min;
    }
  }
}

void dequantize_q4_k(const void* src, float* dst, int64_t n_blocks) {
  dequantize_affine_k<BlockQ4_K>(src, dst, n_blocks, [](const BlockQ4_K& blk, int e) { return nibble_k(blk.qs, e); });
}

void dequantize_q5_k(const void* src, float* dst, int64_t n_blocks) {
  dequantize_affine_k<BlockQ5_K>(src, dst, n_blocks, [](const BlockQ5_K& blk, int e) {
    return nibble_k(blk.qs, e) | one_bit(blk.qh, e) << 4;
  });
}

void dequantize_q6_k(const void* src, float* dst, int64_t n_blocks) {
  const auto* in = static_cast<const BlockQ6_K*>(src);
  for (int64_t b = 0; b < n_blocks; ++b, dst += kQK_K) {
    const float d = fp16_to_fp32(in[b].d);
    for (int e = 0; e < kQK_K; ++e) {
      const float scale = d * float(in[b].scales[e / 16]);
      const int q = (nibble_q6(in[b].ql, e) | two_bits(in[b].qh, e) << 4) - 32;
      dst[e] = scale * float(q);
    }
  }
}

void dequantize_q8_k(const void* src, float* dst, int64_t n_blocks) {
  const auto* in = static_cast<const BlockQ8_K*>(src);
  for (int64_t b = 0; b < n_blocks; ++b, dst += kQK_K) {
    for (int e = 0; e < kQK_K; ++e) dst[e] = in[b].d * float(in[b].qs[e]);
  }
}

void quantize_q2_k(const float* src, void* dst, int64_t n_blocks, const float* importance) {
  quantize_superblocks<BlockQ2_K, kquant::AffineSuperBlock>(
      src, dst, n_blocks, importance,
      [](const float* x, const float* w, kquant::AffineSuperBlock& fit) { kquant::fit_affine_superblock(x, w, kQ2Geometry, fit); },
      [](BlockQ2_K& blk, const kquant::AffineSuperBlock& fit) {
        for (int j = 0; j < 16; ++j) blk.scales[j] = uint8_t(fit.scale[j] | fit.min[j] << 4);
        for (int e = 0; e < kQK_K; ++e) put_two_bits(blk.qs, e, fit.code[e]);
        blk.d = fit.d;
        blk.dmin = fit.dmin;
      });
}

void quantize_q4_k(const float* src, void* dst, int64_t n_blocks, const float* importance) {
  quantize_superblocks<BlockQ4_K, kquant::AffineSuperBlock>(
      src, dst, n_blocks, importance,
      [](const float* x, const float* w, kquant::AffineSuperBlock& fit) { kquant::fit_affine_superblock(x, w, kQ4Geometry, fit); },
      [](BlockQ4_K& blk, const kquant::AffineSuperBlock& fit) {
        blk.d = fit.d;
        blk.dmin = fit.dmin;
        pack_scale_min(fit.scale, fit.min, blk.scales);
        for (int e = 0; e < kQK_K; ++e) put_nibble_k(blk.qs, e, fit.code[e]);
      });
}

void quantize_q5_k(const float* src, void* dst, int64_t n_blocks, const float* importance) {
  quantize_superblocks<BlockQ5_K, kquant::AffineSuperBlock>(
      src, dst, n_blocks, importance,
      [](const float* x, const float* w, kquant::AffineSuperBlock& fit) { kquant::fit_affine_superblock(x, w, kQ5Geometry, fit); },
      [](BlockQ5_K& blk, const kquant::AffineSuperBlock& fit) {
        blk.d = fit.d;
        blk.dmin = fit.dmin;
        pack_scale_min(fit.scale, fit.min, blk.scales);
        for (int e = 0; e < kQK_K; ++e) {
          put_nibble_k(blk.qs, e, fit.code[e]);
          put_one_bit(blk.qh, e, fit.code[e] >> 4);
        }
      });
}

void quantize_q3_k(const float* src, void* dst, int64_t n_blocks, const float* importance) {
  quantize_superblocks<BlockQ3_K, kquant::SymmetricSuperBlock>(
      src, dst, n_blocks, importance,
      [](const float* x, const float* w, kquant::SymmetricSuperBlock& fit) { kquant::fit_symmetric_superblock(x, w, kQ3Geometry, fit); },
      [](BlockQ3_K& blk, const kquant::SymmetricSuperBlock& fit) {
        for (int e = 0; e < kQK_K; ++e) {
          const int u = fit.code[e] + 4;  // 0..7: two low bits, and the hmask bit set for u >= 4
          put_two_bits(blk.qs, e, u & 3);
          put_one_bit(blk.hmask, e, u >> 2);
        }
        pack_q3_scales(fit.scale, blk.scales);
        blk.d = fit.d;
      });
}

void quantize_q6_k(const float* src, void* dst, int64_t n_blocks, const float* importance) {
  quantize_superblocks<BlockQ6_K, kquant::SymmetricSuperBlock>(
      src, dst, n_blocks, importance,
      [](const float* x, const float* w, kquant::SymmetricSuperBlock& fit) { kquant::fit_symmetric_superblock(x, w, kQ6Geometry, fit); },
      [](BlockQ6_K& blk, const kquant::SymmetricSuperBlock& fit) {
        for (int e = 0; e < kQK_K; ++e) {
          const int u = fit.code[e] + 32;  // 0..63
          put_nibble_q6(blk.ql, e, u & 0x0f);
          put_two_bits(blk.qh, e, u >> 4);
        }
        std::copy(fit.scale, fit.scale + 16, blk.scales);
        blk.d = fit.d;
      });
}

// Activation format: the largest-magnitude element maps to -128 exactly, the
// rest round to nearest within [-128, 127]; bsums are per-16 code sums.
void quantize_q8_k(const float* src, void* dst, int64_t n_blocks, const float*) {
  auto* out = static_cast<BlockQ8_K*>(dst);
  for (int64_t b = 0; b < n_blocks; ++b, src += kQK_K) {
    BlockQ8_K& blk = out[b];
    float peak = 0;
    for (int e = 0; e < kQK_K; ++e) {
      if (std::fabs(src[e]) > std::fabs(peak)) peak = src[e];
    }
    const float inv = peak != 0 ? -128.0f / peak : 0.0f;
    for (int e = 0; e < kQK_K; ++e) blk.qs[e] = int8_t(std::clamp(int(std::lrint(src[e] * inv)), -128, 127));
    for (int g = 0; g < kQK_K / 16; ++g) {
      int sum = 0;
      for (int e = 16 * g; e < 16 * g + 16; ++e) sum += blk.qs[e];
      blk.bsums[g] = int16_t(sum);
    }
    blk.d = peak != 0 ? 1.0f / inv : 0.0f;
  }
}

}  // namespace nt::formats

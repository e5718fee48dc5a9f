// MXFP4. The encoder follows gguf-py's (gguf.quants.MXFP4) step by step in
// float32, so its bytes match it exactly: the block's exponent is
// floor(log2(max|x|)) - 2 (the largest value, 6 = 12 / 2, then lands within
// [4, 8) of the scale), and each element takes the first of the 16 codes
// whose value is nearest (so 0 before -0, and ties to the lower code).
#include <cmath>

#include "quant/blocks.h"
#include "quant/quant_formats.h"

namespace nt::formats {
namespace {

constexpr int kHalf = kQK / 2;

uint8_t nearest_code(float x, float scale) {
  uint8_t best = 0;
  float best_err = std::fabs(float(kMxfp4Values[0]) * scale - x);
  for (uint8_t i = 1; i < 16; ++i) {
    const float err = std::fabs(float(kMxfp4Values[i]) * scale - x);
    if (err < best_err) best = i, best_err = err;
  }
  return best;
}

// The exponent byte as gguf-py computes it, wrapping modulo 256 as its uint8 cast does.
uint8_t block_exponent(const float* x) {
  float amax = 0.0f;
  for (int j = 0; j < kQK; ++j) amax = std::fmax(amax, std::fabs(x[j]));
  if (amax == 0.0f) return 0;
  return uint8_t(int(std::floor(std::log2(amax)) - 2.0f + 127.0f));
}

}  // namespace

void quantize_mxfp4(const float* src, void* dst, int64_t n_blocks, const float*) {
  auto* out = static_cast<BlockMXFP4*>(dst);
  for (int64_t b = 0; b < n_blocks; ++b, src += kQK) {
    out[b].e = block_exponent(src);
    const float scale = mxfp4_scale(out[b].e);
    for (int j = 0; j < kHalf; ++j) {
      out[b].qs[j] = uint8_t(nearest_code(src[j], scale) | nearest_code(src[j + kHalf], scale) << 4);
    }
  }
}

void dequantize_mxfp4(const void* src, float* dst, int64_t n_blocks) {
  const auto* in = static_cast<const BlockMXFP4*>(src);
  for (int64_t b = 0; b < n_blocks; ++b, dst += kQK) {
    const float scale = mxfp4_scale(in[b].e);
    for (int j = 0; j < kHalf; ++j) {
      dst[j] = float(kMxfp4Values[in[b].qs[j] & 0x0f]) * scale;
      dst[j + kHalf] = float(kMxfp4Values[in[b].qs[j] >> 4]) * scale;
    }
  }
}

}  // namespace nt::formats

// Scale search for the K-quant encoders: given a super-block of 256 floats
// and per-element weights, choose integer codes, small integer sub-block
// scales and the fp16 super-block scales that minimise the weighted squared
// error of the decoded values. Pure arithmetic, no allocation; the callers in
// quant_kquants.cpp only pack the result into the GGUF byte layouts.
#pragma once

#include <cstdint>

#include "quant/tensor_type.h"

namespace nt::kquant {

constexpr int kMaxSubBlocks = 16;

// x ~ d * scale[j] * code - dmin * min[j], code in [0, code_max],
// scale[j], min[j] in [0, scale_max]; for Q2_K, Q4_K and Q5_K.
struct AffineGeometry {
  int sub_size;    // elements per sub-block
  int code_max;    // 3, 15 or 31
  int scale_max;   // 15 or 63
};
struct AffineSuperBlock {
  uint16_t d, dmin;  // fp16 bits
  uint8_t scale[kMaxSubBlocks];
  uint8_t min[kMaxSubBlocks];
  uint8_t code[kQK_K];
};
void fit_affine_superblock(const float* x, const float* weight, const AffineGeometry& geometry,
                           AffineSuperBlock& out);

// x ~ d * scale[j] * code, code in [-code_neg, code_neg - 1],
// scale[j] in [-scale_neg, scale_neg - 1]; for Q3_K and Q6_K.
struct SymmetricGeometry {
  int sub_size;
  int code_neg;   // 4 or 32
  int scale_neg;  // 32 or 128
};
struct SymmetricSuperBlock {
  uint16_t d;  // fp16 bits
  int8_t scale[kMaxSubBlocks];
  int8_t code[kQK_K];
};
void fit_symmetric_superblock(const float* x, const float* weight, const SymmetricGeometry& geometry,
                              SymmetricSuperBlock& out);

// Per-element weights of the squared error for one super-block:
// sqrt(sigma^2 + x^2), sigma^2 the block's mean square, so large-magnitude
// elements count more (as K-quant encoders customarily weight them) without
// ignoring small ones; multiplied by `importance` (256 values) when given.
void error_weights(const float* x, const float* importance, float* weight);

}  // namespace nt::kquant

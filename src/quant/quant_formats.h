// Per-format reference codecs behind quant.h. Each works on a whole number of
// blocks (the caller checked the count) and touches no heap.
#pragma once

#include <cstdint>

namespace nt::formats {

// Plain floating-point storage, one element per "block" (quant_float.cpp).
void dequantize_f32(const void* src, float* dst, int64_t n_blocks);
void quantize_f32(const float* src, void* dst, int64_t n_blocks, const float* importance);
void dequantize_f16(const void* src, float* dst, int64_t n_blocks);
void dequantize_bf16(const void* src, float* dst, int64_t n_blocks);
void quantize_f16(const float* src, void* dst, int64_t n_blocks, const float* importance);
void quantize_bf16(const float* src, void* dst, int64_t n_blocks, const float* importance);

// Legacy 32-element blocks (quant_legacy.cpp).
void dequantize_q4_0(const void* src, float* dst, int64_t n_blocks);
void dequantize_q4_1(const void* src, float* dst, int64_t n_blocks);
void dequantize_q5_0(const void* src, float* dst, int64_t n_blocks);
void dequantize_q5_1(const void* src, float* dst, int64_t n_blocks);
void dequantize_q8_0(const void* src, float* dst, int64_t n_blocks);
void dequantize_q8_1(const void* src, float* dst, int64_t n_blocks);
void quantize_q4_0(const float* src, void* dst, int64_t n_blocks, const float* importance);
void quantize_q4_1(const float* src, void* dst, int64_t n_blocks, const float* importance);
void quantize_q5_0(const float* src, void* dst, int64_t n_blocks, const float* importance);
void quantize_q5_1(const float* src, void* dst, int64_t n_blocks, const float* importance);
void quantize_q8_0(const float* src, void* dst, int64_t n_blocks, const float* importance);
void quantize_q8_1(const float* src, void* dst, int64_t n_blocks, const float* importance);

// MXFP4: 32 E2M1 values under one E8M0 scale (quant_mxfp4.cpp).
void dequantize_mxfp4(const void* src, float* dst, int64_t n_blocks);
void quantize_mxfp4(const float* src, void* dst, int64_t n_blocks, const float* importance);

// K-quant 256-element super-blocks (quant_kquants.cpp).
void dequantize_q2_k(const void* src, float* dst, int64_t n_blocks);
void dequantize_q3_k(const void* src, float* dst, int64_t n_blocks);
void dequantize_q4_k(const void* src, float* dst, int64_t n_blocks);
void dequantize_q5_k(const void* src, float* dst, int64_t n_blocks);
void dequantize_q6_k(const void* src, float* dst, int64_t n_blocks);
void dequantize_q8_k(const void* src, float* dst, int64_t n_blocks);
void quantize_q2_k(const float* src, void* dst, int64_t n_blocks, const float* importance);
void quantize_q3_k(const float* src, void* dst, int64_t n_blocks, const float* importance);
void quantize_q4_k(const float* src, void* dst, int64_t n_blocks, const float* importance);
void quantize_q5_k(const float* src, void* dst, int64_t n_blocks, const float* importance);
void quantize_q6_k(const float* src, void* dst, int64_t n_blocks, const float* importance);
void quantize_q8_k(const float* src, void* dst, int64_t n_blocks, const float* importance);

}  // namespace nt::formats

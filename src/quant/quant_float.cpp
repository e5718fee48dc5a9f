// F32, F16 and BF16 rows. The conversions in core/half.h round exactly as
// numpy's astype(float16) and gguf-py's BF16 quantizer do.
#include <cstring>

#include "core/half.h"
#include "quant/quant_formats.h"

namespace nt::formats {

void dequantize_f32(const void* src, float* dst, int64_t n_blocks) {
  std::memcpy(dst, src, size_t(n_blocks) * sizeof(float));
}

void quantize_f32(const float* src, void* dst, int64_t n_blocks, const float*) {
  std::memcpy(dst, src, size_t(n_blocks) * sizeof(float));
}

void dequantize_f16(const void* src, float* dst, int64_t n_blocks) {
  const auto* h = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n_blocks; ++i) dst[i] = fp16_to_fp32(h[i]);
}

void quantize_f16(const float* src, void* dst, int64_t n_blocks, const float*) {
  auto* h = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n_blocks; ++i) h[i] = fp32_to_fp16(src[i]);
}

void dequantize_bf16(const void* src, float* dst, int64_t n_blocks) {
  const auto* h = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n_blocks; ++i) dst[i] = bf16_to_fp32(h[i]);
}

void quantize_bf16(const float* src, void* dst, int64_t n_blocks, const float*) {
  auto* h = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n_blocks; ++i) h[i] = fp32_to_bf16(src[i]);
}

}  // namespace nt::formats

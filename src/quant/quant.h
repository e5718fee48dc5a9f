// Reference (scalar, exact) conversion between float32 and every format.
// Fast dot products live in the backends; these define the numbers.
#pragma once

#include <cstdint>

#include "quant/tensor_type.h"

namespace nt {

// Decodes n elements (a whole number of blocks) of `type` from src into dst,
// bit for bit as gguf-py's gguf.quants.dequantize does.
void dequantize_row(TensorType type, const void* src, float* dst, int64_t n);

// Encodes n elements (a whole number of blocks) into `type`. F16, BF16 and the
// legacy formats give the same bytes as gguf-py's gguf.quants.quantize; the
// K-quants search their block scales (see kquant_search.h).
// `importance` (optional, n non-negative weights, e.g. mean squared
// activations per column) biases the K-quant scale search; other formats
// ignore it. Touches no heap, so rows can be encoded from many threads.
void quantize_row(TensorType type, const float* src, void* dst, int64_t n, const float* importance = nullptr);

// True if quantize_row and dequantize_row support `type`.
bool can_quantize(TensorType type);

}  // namespace nt

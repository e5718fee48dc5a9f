// Reference (scalar, exact) conversion between float32 and every format.
// Fast dot products live in the backends; these define the numbers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "quant/tensor_type.h"

namespace nt {

// Decodes n elements (a whole number of blocks) of `type` from src into dst.
void dequantize_row(TensorType type, const void* src, float* dst, int64_t n);

// Encodes n elements (a whole number of blocks) into `type`. The legacy
// formats round as gguf-py does; the K-quants search their block scales.
// `importance` (optional, n weights) biases the K-quant scale search.
void quantize_row(TensorType type, const float* src, void* dst, int64_t n, const float* importance = nullptr);

// True if quantize_row supports `type`.
bool can_quantize(TensorType type);

}  // namespace nt

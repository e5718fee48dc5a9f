// Dispatch from TensorType to the per-format codecs in quant_formats.h.
#include "quant/quant.h"

#include <array>

#include "core/error.h"
#include "quant/quant_formats.h"

namespace nt {
namespace {

using DequantizeFn = void (*)(const void*, float*, int64_t);
using QuantizeFn = void (*)(const float*, void*, int64_t, const float*);

struct Codec {
  TensorType type;
  DequantizeFn dequantize;
  QuantizeFn quantize;
};

constexpr std::array kCodecs = {
    Codec{TensorType::F32, formats::dequantize_f32, formats::quantize_f32},
    Codec{TensorType::F16, formats::dequantize_f16, formats::quantize_f16},
    Codec{TensorType::BF16, formats::dequantize_bf16, formats::quantize_bf16},
    Codec{TensorType::Q4_0, formats::dequantize_q4_0, formats::quantize_q4_0},
    Codec{TensorType::Q4_1, formats::dequantize_q4_1, formats::quantize_q4_1},
    Codec{TensorType::Q5_0, formats::dequantize_q5_0, formats::quantize_q5_0},
    Codec{TensorType::Q5_1, formats::dequantize_q5_1, formats::quantize_q5_1},
    Codec{TensorType::Q8_0, formats::dequantize_q8_0, formats::quantize_q8_0},
    Codec{TensorType::Q8_1, formats::dequantize_q8_1, formats::quantize_q8_1},
    Codec{TensorType::Q2_K, formats::dequantize_q2_k, formats::quantize_q2_k},
    Codec{TensorType::Q3_K, formats::dequantize_q3_k, formats::quantize_q3_k},
    Codec{TensorType::Q4_K, formats::dequantize_q4_k, formats::quantize_q4_k},
    Codec{TensorType::Q5_K, formats::dequantize_q5_k, formats::quantize_q5_k},
    Codec{TensorType::Q6_K, formats::dequantize_q6_k, formats::quantize_q6_k},
    Codec{TensorType::Q8_K, formats::dequantize_q8_k, formats::quantize_q8_k},
    Codec{TensorType::MXFP4, formats::dequantize_mxfp4, formats::quantize_mxfp4},
};

const Codec* find_codec(TensorType type) {
  for (const auto& codec : kCodecs) {
    if (codec.type == type) return &codec;
  }
  return nullptr;
}

const Codec& codec_for(TensorType type, const char* what) {
  const Codec* codec = find_codec(type);
  if (!codec) fail("cannot {} tensor type {}: no codec for it", what, tensor_type_name(type));
  return *codec;
}

// Validates n against the block size (row_bytes throws) and returns the block count.
int64_t block_count(TensorType type, int64_t n) {
  row_bytes(type, n);
  return n / tensor_type_info(type).block_elems;
}

}  // namespace

void dequantize_row(TensorType type, const void* src, float* dst, int64_t n) {
  const Codec& codec = codec_for(type, "dequantize");
  codec.dequantize(src, dst, block_count(type, n));
}

void quantize_row(TensorType type, const float* src, void* dst, int64_t n, const float* importance) {
  const Codec& codec = codec_for(type, "quantize to");
  codec.quantize(src, dst, block_count(type, n), importance);
}

bool can_quantize(TensorType type) { return find_codec(type) != nullptr; }

}  // namespace nt

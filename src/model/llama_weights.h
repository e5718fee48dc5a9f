// The tensors of a Llama model, located in a GGUF file and checked against the
// config: every dtype and shape is validated at load, naming expected and actual.
#pragma once

#include <cstdint>
#include <vector>

#include "gguf/gguf_file.h"
#include "model/llama_config.h"

namespace nt {

// A weight matrix (or vector) in file memory. rows x cols with each row of
// `cols` contiguous elements: GGUF shape [cols, rows].
struct WeightRef {
  const GgufTensorInfo* info = nullptr;
  const uint8_t* data = nullptr;
  TensorType type = TensorType::F32;
  int64_t rows = 0, cols = 0;

  size_t row_stride() const { return row_bytes(type, cols); }
  // Norm vectors are validated as F32 at load.
  const float* f32() const { return reinterpret_cast<const float*>(data); }
  uint64_t bytes() const { return info ? info->n_bytes : 0; }
};

struct LlamaLayerWeights {
  WeightRef attn_norm;    // [dim] F32
  WeightRef wq, wk, wv;   // [q_dim x dim], [kv_dim x dim], [kv_dim x dim]
  WeightRef wo;           // [dim x q_dim]
  WeightRef ffn_norm;     // [dim] F32
  WeightRef w_gate, w_up; // [ffn_dim x dim]
  WeightRef w_down;       // [dim x ffn_dim]

  uint64_t bytes() const;
};

struct LlamaWeights {
  WeightRef token_embd;   // [vocab x dim]
  WeightRef output_norm;  // [dim] F32
  WeightRef output;       // [vocab x dim]; token_embd when tied
  WeightRef rope_freqs;   // [rope_dim/2] F32, optional (Llama 3.1)
  std::vector<LlamaLayerWeights> layers;
};

LlamaWeights load_llama_weights(const GgufFile& file, const LlamaConfig& config);

}  // namespace nt

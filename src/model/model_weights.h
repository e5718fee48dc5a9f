// The tensors of a model, located in a GGUF file by the roles its spec gives
// each layer: every dtype and shape is validated at load, naming expected and
// actual.
#pragma once

#include <cstdint>
#include <vector>

#include "gguf/gguf_file.h"
#include "model/arch/layer_roles.h"

namespace nt {

// A weight matrix (or vector) in file memory. rows x cols with each row of
// `cols` contiguous elements: GGUF shape [cols, rows]. A stack of expert
// matrices (GGUF shape [cols, rows / experts, experts]) is the matrix of all
// their rows, expert after expert.
struct WeightRef {
  const GgufTensorInfo* info = nullptr;
  const uint8_t* data = nullptr;
  TensorType type = TensorType::F32;
  int64_t rows = 0, cols = 0;
  int64_t experts = 0;  // > 0: a stack of that many matrices

  size_t row_stride() const { return row_bytes(type, cols); }
  // Norm vectors are validated as F32 at load.
  const float* f32() const { return reinterpret_cast<const float*>(data); }
  // The whole tensor's bytes (a stack's, for an expert's view too).
  uint64_t bytes() const { return info ? info->n_bytes : 0; }
  // Expert e's matrix of a stack: its rows / experts rows, each expert's rows
  // being whole rows of quant blocks.
  WeightRef expert(int64_t e) const;
};

// A layer's tensors by role; the roles its spec lacks are empty.
struct LayerWeights {
  std::array<WeightRef, kLayerRoleCount> by_role;

  const WeightRef& operator[](LayerRole role) const { return by_role[size_t(role)]; }
  WeightRef& operator[](LayerRole role) { return by_role[size_t(role)]; }
  bool has(LayerRole role) const { return (*this)[role].cols > 0; }
  uint64_t bytes() const;
};

struct ModelWeights {
  WeightRef token_embd;   // [vocab x dim]
  WeightRef output_norm;  // [dim] F32
  WeightRef output;       // [vocab x dim]; token_embd when tied
  WeightRef rope_freqs;   // [rope_dim/2] F32, optional (Llama 3.1)
  std::vector<LayerWeights> layers;
};

ModelWeights load_model_weights(const GgufFile& file, const ModelSpec& spec);

}  // namespace nt

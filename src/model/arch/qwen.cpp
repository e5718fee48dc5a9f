#include "model/arch/builders.h"

namespace nt::arch {

// Qwen2 and Qwen2.5: Llama with biases on the Q, K and V projections (where
// the file has them: they are optional) and RoPE over the halves of each head.
ModelSpec build_qwen2(const GgufHeader& header) {
  ModelSpec spec = read_common(header, "qwen2");
  spec.rope_style = RopeStyle::Halves;
  const bool biases = header.find_tensor("blk.0.attn_q.bias") != nullptr;
  for (LayerSpec& layer : spec.layers) layer.attention.qkv_bias = biases;
  return spec;
}

// Qwen3: Llama with a per-head RMSNorm of Q and K before RoPE (no biases),
// RoPE over the halves, and a head width of its own (attention.key_length).
ModelSpec build_qwen3(const GgufHeader& header) {
  ModelSpec spec = read_common(header, "qwen3");
  spec.rope_style = RopeStyle::Halves;
  for (LayerSpec& layer : spec.layers) layer.attention.qk_norm = true;
  return spec;
}

}  // namespace nt::arch

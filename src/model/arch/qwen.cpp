#include "core/error.h"
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

// Qwen3-MoE: Qwen3's attention, and a mixture of experts (no shared expert)
// in every layer, each expert_feed_forward_length wide (when absent, the
// dense width split among the experts used, as the reference engine reads it).
ModelSpec build_qwen3moe(const GgufHeader& header) {
  ModelSpec spec = read_common(header, "qwen3moe");
  spec.rope_style = RopeStyle::Halves;
  for (LayerSpec& layer : spec.layers) layer.attention.qk_norm = true;
  if (header.get_int("qwen3moe.expert_count", 0) <= 0) fail("metadata 'qwen3moe.expert_count' must be positive");
  const int64_t used = header.get_int("qwen3moe.expert_used_count");
  if (used <= 0) fail("metadata 'qwen3moe.expert_used_count' must be positive");
  read_experts(header, header.get_int("qwen3moe.expert_feed_forward_length", spec.ffn_dim / used), spec);
  return spec;
}

}  // namespace nt::arch

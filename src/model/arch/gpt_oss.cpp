#include <cmath>

#include "core/error.h"
#include "model/arch/builders.h"

namespace nt::arch {
namespace {

// Unless the file says otherwise, layers alternate from the first: sliding, full, sliding, ...
constexpr int64_t kGptOssPattern = 2;

}  // namespace

// gpt-oss: a mixture of experts in every layer (biases on the router and the
// experts, top-k logits softmaxed among themselves, a clamped SwiGLU), biases
// on Q, K, V and the output, attention sinks, sliding-window layers
// alternating with full ones, YaRN RoPE over the halves of each head in all
// of them, and the FFN's input norm stored as post_attention_norm.
ModelSpec build_gpt_oss(const GgufHeader& header) {
  ModelSpec spec = read_common(header, "gpt-oss");
  spec.rope_style = RopeStyle::Halves;
  spec.attention_scale = 1.0f / std::sqrt(float(spec.rope_dim));  // the reference engine scales by the rotated width
  if (header.get_int("gpt-oss.expert_count", 0) <= 0) fail("metadata 'gpt-oss.expert_count' must be positive");
  read_experts(header, header.get_int("gpt-oss.expert_feed_forward_length"), spec);
  const int64_t window = header.get_int("gpt-oss.attention.sliding_window");
  // The sliding layers keep the model's scaling; only their base may differ.
  const RopeSpec sliding_rope{float(header.get_float("gpt-oss.rope.freq_base_swa", spec.rope_theta)), spec.rope_scaling};
  const std::vector<bool> sliding = read_sliding_layers(header, "gpt-oss", spec.n_layers, kGptOssPattern);
  const bool qkv_bias = header.find_tensor("blk.0.attn_q.bias") != nullptr;
  for (size_t l = 0; l < spec.layers.size(); ++l) {
    LayerSpec& layer = spec.layers[l];
    layer.attention.qkv_bias = qkv_bias;
    layer.attention.output_bias = true;
    layer.attention.sinks = true;
    layer.ffn_norm_named_post_attention = true;
    layer.activation = FfnActivation::SwigluOai;
    layer.moe.gating = ExpertGating::TopKSoftmax;
    layer.moe.biases = true;
    if (sliding[l]) {
      layer.attention.window = window;
      layer.attention.rope = sliding_rope;
    }
  }
  return spec;
}

}  // namespace nt::arch

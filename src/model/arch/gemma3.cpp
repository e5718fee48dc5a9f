#include <cmath>

#include "core/error.h"
#include "model/arch/builders.h"

namespace nt::arch {
namespace {

// Unless the file says otherwise: five local (sliding-window) layers, then
// one global, from the first layer, and the local layers' RoPE base.
constexpr int64_t kGemma3Pattern = 6;
constexpr double kGemma3LocalRopeTheta = 10000.0;
// The 27B model scales queries by 1/sqrt(dim / heads) (query_pre_attn_scalar
// 168), the smaller ones by 1/sqrt(head_dim); its 62 layers identify it.
constexpr int64_t kGemma3_27bLayers = 62;

}  // namespace

// Gemma 3: embeddings scaled by sqrt(dim), GeGLU, Q/K norms, a norm after
// the attention and after the FFN, and sliding-window layers with their own
// RoPE base between the global ones.
ModelSpec build_gemma3(const GgufHeader& header) {
  ModelSpec spec = read_common(header, "gemma3");
  spec.rope_style = RopeStyle::Halves;
  spec.embedding_scale = std::sqrt(float(spec.dim));
  if (spec.n_layers == kGemma3_27bLayers && spec.n_heads > 0) spec.attention_scale = 1.0f / std::sqrt(float(spec.dim / spec.n_heads));
  // Without a window every layer is global.
  const int64_t window = header.get_int("gemma3.attention.sliding_window", 0);
  const RopeSpec local_rope{float(header.get_float("gemma3.rope.freq_base_swa", kGemma3LocalRopeTheta)), {}};
  const std::vector<bool> local = read_sliding_layers(header, "gemma3", spec.n_layers, kGemma3Pattern);
  for (size_t l = 0; l < spec.layers.size(); ++l) {
    LayerSpec& layer = spec.layers[l];
    layer.attention.qk_norm = true;
    layer.post_attention_norm = true;
    layer.post_ffn_norm = true;
    layer.activation = FfnActivation::GeluTanh;
    if (window > 0 && local[l]) {
      layer.attention.window = window;
      layer.attention.rope = local_rope;
    }
  }
  return spec;
}

}  // namespace nt::arch

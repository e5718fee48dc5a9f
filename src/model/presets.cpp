#include "model/presets.h"

#include <cmath>

namespace nt {
namespace {

struct Shape {
  int64_t layers, dim, ffn, heads, kv_heads, head_dim, vocab, context;
  float theta, rms_eps;
  bool tied;
};

// A spec as its family's builder reads it back from the file make-model writes.
ModelSpec spec(std::string architecture, const Shape& s) {
  ModelSpec c;
  c.architecture = std::move(architecture);
  c.n_layers = s.layers;
  c.dim = s.dim;
  c.ffn_dim = s.ffn;
  c.n_heads = s.heads;
  c.n_kv_heads = s.kv_heads;
  c.head_dim = s.head_dim;
  c.rope_dim = s.head_dim;
  c.vocab_size = s.vocab;
  c.context_length = s.context;
  c.rope_theta = s.theta;
  c.rms_eps = s.rms_eps;
  c.tied_embeddings = s.tied;
  c.attention_scale = 1.0f / std::sqrt(float(s.head_dim));
  c.layers.assign(size_t(s.layers), llama_layer(c));
  return c;
}

ModelSpec llama(const Shape& s) { return spec("llama", s); }

// Llama 3.1 frequency scaling, carried as the rope_freqs tensor like real conversions.
ModelSpec with_llama31_rope(ModelSpec c, float factor) {
  c.rope_scaling.kind = RopeScaling::Kind::Llama3;
  c.rope_scaling.factor = factor;
  c.rope_scaling.low_freq_factor = 1.0f;
  c.rope_scaling.high_freq_factor = 4.0f;
  c.rope_scaling.original_context = 8192;
  c.has_rope_freqs_tensor = true;
  for (LayerSpec& l : c.layers) l.attention.rope = c.rope();
  return c;
}

ModelSpec qwen2(const Shape& s) {
  ModelSpec c = spec("qwen2", s);
  c.rope_style = RopeStyle::Halves;
  for (LayerSpec& l : c.layers) l.attention.qkv_bias = true;
  return c;
}

ModelSpec qwen3(const Shape& s) {
  ModelSpec c = spec("qwen3", s);
  c.rope_style = RopeStyle::Halves;
  for (LayerSpec& l : c.layers) l.attention.qk_norm = true;
  return c;
}

// A mixture of `experts` experts, `used` of them per token, each `width` wide, in every layer.
ModelSpec with_experts(ModelSpec c, int64_t experts, int64_t used, int64_t width) {
  for (LayerSpec& l : c.layers) l.moe = {experts, used, width};
  return c;
}

// Mixtral: Llama layers whose FFN is a mixture of experts as wide as feed_forward_length.
ModelSpec mixtral(const Shape& s, int64_t experts, int64_t used) { return with_experts(llama(s), experts, used, s.ffn); }

// Qwen3-MoE: Qwen3's attention and a mixture of experts of their own width.
ModelSpec qwen3moe(const Shape& s, int64_t experts, int64_t used, int64_t width) {
  ModelSpec c = qwen3(s);
  c.architecture = "qwen3moe";
  return with_experts(std::move(c), experts, used, width);
}

// Gemma 3 with its sliding window and its global layers' linear RoPE scaling
// (the family's builder supplies the rest: see model/arch/gemma3.cpp).
ModelSpec gemma3(const Shape& s, int64_t window, float rope_factor, float query_scale_dim) {
  ModelSpec c = spec("gemma3", s);
  c.rope_style = RopeStyle::Halves;
  if (rope_factor != 1.0f) c.rope_scaling = {RopeScaling::Kind::Linear, rope_factor};
  c.embedding_scale = std::sqrt(float(s.dim));
  c.attention_scale = 1.0f / std::sqrt(query_scale_dim);
  for (size_t l = 0; l < c.layers.size(); ++l) {
    LayerSpec& layer = c.layers[l];
    layer.attention.qk_norm = true;
    layer.post_attention_norm = layer.post_ffn_norm = true;
    layer.activation = FfnActivation::GeluTanh;
    const bool local = l % 6 < 5;
    layer.attention.window = local ? window : 0;
    layer.attention.rope = local ? RopeSpec{10000.0f, {}} : c.rope();
  }
  return c;
}

// gpt-oss: experts with biases routed by a softmax over the chosen logits, a
// clamped SwiGLU, sinks and Q/K/V/output biases, sliding layers (the even
// ones) alternating with full ones, YaRN x32 from `original_context` on every
// layer (the builder supplies the rest: see model/arch/gpt_oss.cpp).
ModelSpec gpt_oss(const Shape& s, int64_t experts, int64_t used, int64_t width, int64_t window, int64_t original_context) {
  ModelSpec c = with_experts(spec("gpt-oss", s), experts, used, width);
  c.rope_style = RopeStyle::Halves;
  c.rope_scaling.kind = RopeScaling::Kind::Yarn;
  c.rope_scaling.factor = 32.0f;
  c.rope_scaling.original_context = original_context;
  for (size_t l = 0; l < c.layers.size(); ++l) {
    LayerSpec& layer = c.layers[l];
    layer.attention.rope = c.rope();
    layer.attention.qkv_bias = layer.attention.output_bias = layer.attention.sinks = true;
    layer.attention.window = l % 2 == 0 ? window : 0;
    layer.ffn_norm_named_post_attention = true;
    layer.activation = FfnActivation::SwigluOai;
    layer.moe.gating = ExpertGating::TopKSoftmax;
    layer.moe.biases = true;
  }
  return c;
}

std::vector<ModelPreset> presets() {
  using enum SyntheticVocabStyle;
  return {
      // Small enough for unit tests; widths are multiples of 256 so every K-quant applies.
      {"tiny", llama({4, 256, 768, 8, 4, 32, 4096, 2048, 10000.0f, 1e-5f, true}), SmolLM2},
      {"tiny-qwen2", qwen2({4, 256, 768, 8, 4, 32, 4096, 2048, 1000000.0f, 1e-6f, false}), Llama3},
      {"tiny-qwen3", qwen3({4, 256, 768, 4, 2, 128, 4096, 2048, 1000000.0f, 1e-6f, false}), Llama3},
      // Six layers: five local ones with a window of 16, then a global one. Untied: a
      // tied random head would mostly predict the current token again.
      {"tiny-gemma3", gemma3({6, 256, 768, 4, 2, 64, 4096, 2048, 1000000.0f, 1e-6f, false}, 16, 8.0f, 64.0f), Llama3},
      // Mixtures of 8 experts, 2 per token, 256 wide. Untied, as the real models are.
      {"tiny-mixtral", mixtral({4, 256, 256, 8, 4, 32, 4096, 2048, 1000000.0f, 1e-5f, false}, 8, 2), Llama3},
      {"tiny-qwen3moe", qwen3moe({4, 256, 768, 4, 2, 128, 4096, 2048, 1000000.0f, 1e-6f, false}, 8, 2, 256), Llama3},
      // Four layers, two of them sliding with a window of 16; 8 experts, 4 per token, in MXFP4;
      // YaRN from 128 positions (the real ratio: 32 x 4096 = 131072).
      {"tiny-gpt-oss", gpt_oss({4, 256, 256, 8, 2, 64, 4096, 4096, 150000.0f, 1e-5f, false}, 8, 4, 256, 16, 128), GptOss,
       TensorType::MXFP4},
      {"smollm2-135m", llama({30, 576, 1536, 9, 3, 64, 49152, 8192, 100000.0f, 1e-5f, true}), SmolLM2},
      {"llama3-1b", with_llama31_rope(llama({16, 2048, 8192, 32, 8, 64, 128256, 131072, 500000.0f, 1e-5f, true}), 32.0f), Llama3},
      {"llama3-8b", with_llama31_rope(llama({32, 4096, 14336, 32, 8, 128, 128256, 131072, 500000.0f, 1e-5f, false}), 8.0f), Llama3},
      {"llama3-70b", with_llama31_rope(llama({80, 8192, 28672, 64, 8, 128, 128256, 131072, 500000.0f, 1e-5f, false}), 8.0f), Llama3},
      {"llama3-405b", with_llama31_rope(llama({126, 16384, 53248, 128, 8, 128, 128256, 131072, 500000.0f, 1e-5f, false}), 8.0f),
       Llama3},
      {"qwen2.5-7b", qwen2({28, 3584, 18944, 28, 4, 128, 152064, 32768, 1000000.0f, 1e-6f, false}), Qwen2},
      {"qwen3-8b", qwen3({36, 4096, 12288, 32, 8, 128, 151936, 40960, 1000000.0f, 1e-6f, false}), Qwen3},
      {"qwen3-32b", qwen3({64, 5120, 25600, 64, 8, 128, 151936, 40960, 1000000.0f, 1e-6f, false}), Qwen3},
      // Mixtral's own vocabulary is a 32000-piece SentencePiece one; a byte-level one of its size stands in.
      {"mixtral-8x7b", mixtral({32, 4096, 14336, 32, 8, 128, 32000, 32768, 1000000.0f, 1e-5f, false}, 8, 2), Llama3},
      {"qwen3-30b-a3b", qwen3moe({48, 2048, 6144, 32, 4, 128, 151936, 40960, 1000000.0f, 1e-6f, false}, 128, 8, 768), Qwen3},
      {"qwen3-235b-a22b", qwen3moe({94, 4096, 12288, 64, 4, 128, 151936, 40960, 1000000.0f, 1e-6f, false}, 128, 8, 1536),
       Qwen3},
      // OpenAI's published configs: 2880 wide, 64 query heads of 64 over 8 KV heads, experts 2880
      // wide (4 per token), a window of 128, YaRN x32 from 4096, o200k_harmony's 201088 tokens.
      {"gpt-oss-20b", gpt_oss({24, 2880, 2880, 64, 8, 64, 201088, 131072, 150000.0f, 1e-5f, false}, 32, 4, 2880, 128, 4096),
       GptOss, TensorType::MXFP4},
      {"gpt-oss-120b", gpt_oss({36, 2880, 2880, 64, 8, 64, 201088, 131072, 150000.0f, 1e-5f, false}, 128, 4, 2880, 128, 4096),
       GptOss, TensorType::MXFP4},
      // query_pre_attn_scalar 168 = dim / heads.
      {"gemma3-27b", gemma3({62, 5376, 21504, 32, 16, 128, 262208, 131072, 1000000.0f, 1e-6f, true}, 1024, 8.0f, 168.0f), Gemma3},
  };
}

}  // namespace

std::optional<ModelPreset> find_model_preset(std::string_view name) {
  for (auto& p : presets()) {
    if (p.name == name) return p;
  }
  return std::nullopt;
}

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const auto& p : presets()) names.push_back(p.name);
  return names;
}

}  // namespace nt

#include "model/presets.h"

namespace nt {
namespace {

LlamaConfig llama(int64_t layers, int64_t dim, int64_t ffn, int64_t heads, int64_t kv_heads, int64_t vocab,
                  int64_t context, float theta, bool tied) {
  LlamaConfig c;
  c.architecture = "llama";
  c.n_layers = layers;
  c.dim = dim;
  c.ffn_dim = ffn;
  c.n_heads = heads;
  c.n_kv_heads = kv_heads;
  c.head_dim = dim / heads;
  c.rope_dim = c.head_dim;
  c.vocab_size = vocab;
  c.context_length = context;
  c.rope_theta = theta;
  c.rms_eps = 1e-5f;
  c.tied_embeddings = tied;
  return c;
}

// Llama 3.1 frequency scaling, carried as the rope_freqs tensor like real conversions.
LlamaConfig with_llama31_rope(LlamaConfig c, float factor) {
  c.rope_scaling.kind = RopeScaling::Kind::Llama3;
  c.rope_scaling.factor = factor;
  c.rope_scaling.low_freq_factor = 1.0f;
  c.rope_scaling.high_freq_factor = 4.0f;
  c.rope_scaling.original_context = 8192;
  c.has_rope_freqs_tensor = true;
  return c;
}

std::vector<ModelPreset> presets() {
  return {
      // Small enough for unit tests; widths are multiples of 256 so every K-quant applies.
      {"tiny", llama(4, 256, 768, 8, 4, 4096, 2048, 10000.0f, true), SyntheticVocabStyle::SmolLM2},
      {"smollm2-135m", llama(30, 576, 1536, 9, 3, 49152, 8192, 100000.0f, true), SyntheticVocabStyle::SmolLM2},
      {"llama3-1b", with_llama31_rope(llama(16, 2048, 8192, 32, 8, 128256, 131072, 500000.0f, true), 32.0f),
       SyntheticVocabStyle::Llama3},
      {"llama3-8b", with_llama31_rope(llama(32, 4096, 14336, 32, 8, 128256, 131072, 500000.0f, false), 8.0f),
       SyntheticVocabStyle::Llama3},
      {"llama3-70b", with_llama31_rope(llama(80, 8192, 28672, 64, 8, 128256, 131072, 500000.0f, false), 8.0f),
       SyntheticVocabStyle::Llama3},
      {"llama3-405b", with_llama31_rope(llama(126, 16384, 53248, 128, 8, 128256, 131072, 500000.0f, false), 8.0f),
       SyntheticVocabStyle::Llama3},
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

#include <cmath>

#include "core/error.h"
#include "model/arch/builders.h"

namespace nt::arch {
namespace {

RopeScaling read_rope_scaling(const GgufHeader& h, const std::string& p, int64_t context_length) {
  RopeScaling s;
  // A factor without a type is linear scaling, as converters write it (the
  // older key "rope.scale_linear" too).
  const bool has_factor = h.find(p + "rope.scaling.factor") || h.find(p + "rope.scale_linear");
  const std::string kind = h.get_string(p + "rope.scaling.type", std::string(has_factor ? "linear" : "none"));
  if (kind == "linear") {
    s.kind = RopeScaling::Kind::Linear;
    s.factor = float(h.find(p + "rope.scaling.factor") ? h.get_float(p + "rope.scaling.factor") : h.get_float(p + "rope.scale_linear"));
  } else if (kind == "llama3") {
    s.kind = RopeScaling::Kind::Llama3;
    s.factor = float(h.get_float(p + "rope.scaling.factor"));
    s.low_freq_factor = float(h.get_float(p + "rope.scaling.low_freq_factor", 1.0));
    s.high_freq_factor = float(h.get_float(p + "rope.scaling.high_freq_factor", 4.0));
    s.original_context = h.get_int(p + "rope.scaling.original_context_length", 8192);
  } else if (kind == "yarn") {
    s.kind = RopeScaling::Kind::Yarn;
    s.factor = float(h.get_float(p + "rope.scaling.factor"));
    s.original_context = h.get_int(p + "rope.scaling.original_context_length", context_length);
    s.attn_factor = float(h.get_float(p + "rope.scaling.attn_factor", 1.0));
  } else if (kind != "none") {
    fail("metadata '{}rope.scaling.type' = '{}' is not supported (none, linear, llama3, yarn)", p, kind);
  }
  return s;
}

}  // namespace

ModelSpec read_common(const GgufHeader& h, std::string_view architecture) {
  ModelSpec c;
  c.architecture = std::string(architecture);
  const std::string p = c.architecture + ".";
  c.n_layers = h.get_int(p + "block_count");
  c.dim = h.get_int(p + "embedding_length");
  c.ffn_dim = h.get_int(p + "feed_forward_length");
  c.n_heads = h.get_int(p + "attention.head_count");
  c.n_kv_heads = h.get_int(p + "attention.head_count_kv", c.n_heads);
  c.head_dim = h.get_int(p + "attention.key_length", c.n_heads > 0 ? c.dim / c.n_heads : 0);
  c.context_length = h.get_int(p + "context_length");
  c.rms_eps = float(h.get_float(p + "attention.layer_norm_rms_epsilon", 1e-5));
  c.rope_theta = float(h.get_float(p + "rope.freq_base", 10000.0));
  c.rope_dim = h.get_int(p + "rope.dimension_count", c.head_dim);
  c.rope_scaling = read_rope_scaling(h, p, c.context_length);

  const auto& embd = h.tensor("token_embd.weight");
  c.vocab_size = h.get_int(p + "vocab_size", embd.shape.size() == 2 ? embd.shape[1] : 0);
  c.tied_embeddings = h.find_tensor("output.weight") == nullptr;
  c.has_rope_freqs_tensor = h.find_tensor("rope_freqs.weight") != nullptr;
  c.attention_scale = c.head_dim > 0 ? 1.0f / std::sqrt(float(c.head_dim)) : 0.0f;
  c.final_logit_softcap = float(h.get_float(p + "final_logit_softcapping", 0.0));
  c.layers.assign(size_t(std::max<int64_t>(c.n_layers, 0)), llama_layer(c));
  return c;
}

std::vector<bool> read_sliding_layers(const GgufHeader& h, std::string_view architecture, int64_t n_layers,
                                      int64_t default_period) {
  const std::string key = std::string(architecture) + ".attention.sliding_window_pattern";
  std::vector<bool> sliding(static_cast<size_t>(n_layers));
  const GgufValue* pattern = h.find(key);
  if (pattern && pattern->type == GgufValueType::ARRAY) {
    const auto& flags = pattern->as_array(key);
    if (int64_t(flags.size()) != n_layers) fail("metadata '{}' has {} entries for {} layers", key, flags.size(), n_layers);
    for (size_t l = 0; l < sliding.size(); ++l) {
      sliding[l] = flags[l].type == GgufValueType::BOOL ? flags[l].as_bool(key) : flags[l].as_int(key) != 0;
    }
    return sliding;
  }
  const int64_t period = h.get_int(key, default_period);
  for (int64_t l = 0; l < n_layers; ++l) sliding[size_t(l)] = period == 0 || l % period < period - 1;
  return sliding;
}

void read_experts(const GgufHeader& h, int64_t expert_ffn_dim, ModelSpec& spec) {
  const std::string p = spec.architecture + ".";
  const int64_t n_experts = h.get_int(p + "expert_count", 0);
  if (n_experts == 0) return;
  if (n_experts < 0) fail("metadata '{}expert_count' = {} must not be negative", p, n_experts);
  const MoeSpec moe{n_experts, h.get_int(p + "expert_used_count"), expert_ffn_dim};
  for (LayerSpec& layer : spec.layers) layer.moe = moe;
}

}  // namespace nt::arch

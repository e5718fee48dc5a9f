#include "model/arch/model_spec.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "model/arch/builders.h"

namespace nt {
namespace {

struct Architecture {
  std::string_view name;
  ModelSpec (*build)(const GgufHeader&);
};

constexpr Architecture kArchitectures[] = {
    {"llama", arch::build_llama},
    {"qwen2", arch::build_qwen2},
    {"qwen3", arch::build_qwen3},
    {"qwen3moe", arch::build_qwen3moe},
    {"gemma3", arch::build_gemma3},
    {"gpt-oss", arch::build_gpt_oss},
};

std::string supported_list() {
  std::string list;
  for (const auto& a : kArchitectures) list += (list.empty() ? "" : ", ") + std::string(a.name);
  return list;
}

void validate(const ModelSpec& c, const std::string& source) {
  auto require = [&](bool ok, std::string_view what) {
    if (!ok) fail("{}: inconsistent hyperparameters: {}", source, what);
  };
  require(c.n_layers > 0 && c.dim > 0 && c.ffn_dim > 0, "block_count, embedding_length and feed_forward_length must be positive");
  require(c.n_heads > 0 && c.n_kv_heads > 0 && c.n_heads % c.n_kv_heads == 0,
          "attention.head_count must be a positive multiple of attention.head_count_kv");
  require(c.head_dim > 0 && c.head_dim % 2 == 0, "head dimension must be positive and even");
  require(c.rope_dim > 0 && c.rope_dim <= c.head_dim && c.rope_dim % 2 == 0, "rope.dimension_count must be even and at most the head dimension");
  require(c.vocab_size > 0, "vocabulary size must be positive");
  require(c.context_length > 0, "context_length must be positive");
  require(std::all_of(c.layers.begin(), c.layers.end(), [](const LayerSpec& l) { return l.attention.window >= 0; }),
          "attention.sliding_window must not be negative");
  require(std::all_of(c.layers.begin(), c.layers.end(),
                      [](const LayerSpec& l) {
                        const MoeSpec& m = l.moe;
                        return m.n_experts == 0 || (m.n_experts_used > 0 && m.n_experts_used <= m.n_experts && m.expert_ffn_dim > 0);
                      }),
          "expert_used_count must lie in [1, expert_count], and the experts' feed-forward length must be positive");
}

}  // namespace

LayerSpec llama_layer(const ModelSpec& spec) {
  LayerSpec layer;
  layer.attention.rope = spec.rope();
  return layer;
}

std::string describe_layers(const ModelSpec& spec) {
  std::vector<std::string> parts;
  const auto count = [&](auto has) { return std::count_if(spec.layers.begin(), spec.layers.end(), has); };
  const auto every = [&](auto has, std::string what) {
    const auto n = count(has);
    if (n == int64_t(spec.layers.size())) {
      parts.push_back(std::move(what));
    } else if (n > 0) {
      parts.push_back(fmt::format("{} on {} of {} layers", what, n, spec.layers.size()));
    }
  };
  every([](const LayerSpec& l) { return l.attention.qkv_bias; }, "qkv bias");
  every([](const LayerSpec& l) { return l.attention.output_bias; }, "output bias");
  every([](const LayerSpec& l) { return l.attention.sinks; }, "attention sinks");
  every([](const LayerSpec& l) { return l.attention.qk_norm; }, "q/k norm");
  every([](const LayerSpec& l) { return l.post_attention_norm || l.post_ffn_norm; }, "post norms");
  every([](const LayerSpec& l) { return l.activation == FfnActivation::GeluTanh; }, "GeGLU");
  every([](const LayerSpec& l) { return l.activation == FfnActivation::SwigluOai; }, "clamped SwiGLU");
  const auto windowed = std::find_if(spec.layers.begin(), spec.layers.end(), [](const LayerSpec& l) { return l.slides(); });
  if (windowed != spec.layers.end()) {
    every([](const LayerSpec& l) { return l.slides(); }, fmt::format("sliding window {} (rope theta {})",
                                                                                windowed->attention.window,
                                                                                windowed->attention.rope.theta));
  }
  const auto moe = std::find_if(spec.layers.begin(), spec.layers.end(), [](const LayerSpec& l) { return l.has_experts(); });
  if (moe != spec.layers.end()) {
    every([](const LayerSpec& l) { return l.has_experts(); },
          fmt::format("mixture of {} experts ({} used, FFN {}{}{})", moe->moe.n_experts, moe->moe.n_experts_used,
                      moe->moe.expert_ffn_dim, moe->moe.biases ? ", biases" : "",
                      moe->moe.gating == ExpertGating::TopKSoftmax ? ", softmax over the chosen" : ""));
  }
  if (spec.rope_style == RopeStyle::Halves) parts.push_back("rope over halves");
  if (spec.embedding_scale != 1.0f) parts.push_back(fmt::format("embeddings x {:.4g}", spec.embedding_scale));
  if (spec.final_logit_softcap > 0.0f) parts.push_back(fmt::format("logit softcap {}", spec.final_logit_softcap));
  if (parts.empty()) return "llama";
  std::string text;
  for (const auto& p : parts) text += (text.empty() ? "" : ", ") + p;
  return text;
}

bool ModelSpec::llama_layers() const {
  const LayerSpec llama = llama_layer(*this);
  return rope_style == RopeStyle::AdjacentPairs && embedding_scale == 1.0f && final_logit_softcap == 0.0f &&
         std::all_of(layers.begin(), layers.end(), [&](const LayerSpec& l) { return l == llama; });
}

bool ModelSpec::has_experts() const {
  return std::any_of(layers.begin(), layers.end(), [](const LayerSpec& l) { return l.has_experts(); });
}

bool ModelSpec::has_sliding_layers() const {
  return std::any_of(layers.begin(), layers.end(), [](const LayerSpec& l) { return l.slides(); });
}

MoeSpec ModelSpec::widest_experts() const {
  MoeSpec w;
  for (const LayerSpec& l : layers) {
    w.n_experts = std::max(w.n_experts, l.moe.n_experts);
    w.n_experts_used = std::max(w.n_experts_used, l.moe.n_experts_used);
    w.expert_ffn_dim = std::max(w.expert_ffn_dim, l.moe.expert_ffn_dim);
  }
  return w;
}

std::string architecture_prefix(const GgufHeader& header) {
  return header.get_string("general.architecture", std::string("llama")) + ".";
}

std::vector<std::string> supported_architectures() {
  std::vector<std::string> names;
  for (const auto& a : kArchitectures) names.emplace_back(a.name);
  return names;
}

ModelSpec read_model_spec(const GgufHeader& h, const std::string& source) {
  ModelSpec spec;
  try {
    const std::string name = h.get_string("general.architecture");
    const auto* it = std::find_if(std::begin(kArchitectures), std::end(kArchitectures),
                                  [&](const Architecture& a) { return a.name == name; });
    if (it == std::end(kArchitectures)) fail("architecture '{}' is not supported (supported: {})", name, supported_list());
    spec = it->build(h);
  } catch (const Error& e) {
    fail("{}: {}", source, e.what());
  }
  validate(spec, source);
  return spec;
}

}  // namespace nt

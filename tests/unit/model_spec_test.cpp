// The architecture builders: GGUF metadata into a ModelSpec, with the keys
// each family's converters write and the defaults they leave out.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "error_text.h"
#include "model/arch/layer_roles.h"
#include "model/arch/model_spec.h"
#include "model/rope.h"

namespace nt {
namespace {

// A header of `arch` with the shared keys and the tensors the builders look at.
struct Header {
  GgufHeader h;
  std::string p;

  explicit Header(const std::string& arch, int64_t layers = 12) : p(arch + ".") {
    set("general.architecture", GgufValue::of_string(arch));
    set(p + "block_count", GgufValue::of_u32(uint32_t(layers)));
    set(p + "embedding_length", GgufValue::of_u32(256));
    set(p + "feed_forward_length", GgufValue::of_u32(768));
    set(p + "attention.head_count", GgufValue::of_u32(4));
    set(p + "attention.head_count_kv", GgufValue::of_u32(2));
    set(p + "context_length", GgufValue::of_u32(2048));
    tensor("token_embd.weight", {256, 1000});
  }
  void set(std::string key, GgufValue value) { h.metadata.push_back({std::move(key), std::move(value)}); }
  void tensor(std::string name, std::vector<int64_t> shape) {
    GgufTensorInfo t;
    t.name = std::move(name);
    t.shape = std::move(shape);
    h.tensors.push_back(t);
  }
  ModelSpec spec() const { return read_model_spec(h, "model.gguf"); }
};

TEST(ModelSpec, LlamaLayersAreLlama) {
  const ModelSpec s = Header("llama").spec();
  EXPECT_TRUE(s.llama_layers());
  EXPECT_EQ(s.rope_style, RopeStyle::AdjacentPairs);
  EXPECT_FLOAT_EQ(s.attention_scale, 1.0f / 8.0f);  // head_dim 64
  EXPECT_EQ(describe_layers(s), "llama");
  EXPECT_EQ(layer_roles(s, 0).size(), 9u);
}

TEST(ModelSpec, Qwen2BiasesFollowTheFile) {
  Header with("qwen2");
  with.tensor("blk.0.attn_q.bias", {256});
  const ModelSpec biased = with.spec();
  EXPECT_TRUE(biased.layers[11].attention.qkv_bias);
  EXPECT_EQ(biased.rope_style, RopeStyle::Halves);
  EXPECT_FALSE(biased.llama_layers());
  EXPECT_EQ(role_tensor_name(3, LayerRole::AttnKBias), "blk.3.attn_k.bias");
  EXPECT_FALSE(Header("qwen2").spec().layers[0].attention.qkv_bias);
}

TEST(ModelSpec, Qwen3HeadWidthOfItsOwn) {
  Header h("qwen3");
  h.set("qwen3.attention.key_length", GgufValue::of_u32(128));
  const ModelSpec s = h.spec();
  EXPECT_EQ(s.head_dim, 128);
  EXPECT_EQ(s.q_dim(), 512);  // wider than the embedding
  EXPECT_EQ(s.rope_dim, 128);
  EXPECT_TRUE(s.layers[0].attention.qk_norm);
  EXPECT_EQ(role_shape(s, LayerRole::AttnQNorm).cols, 128);
  EXPECT_EQ(role_shape(s, LayerRole::AttnOutput).cols, 512);
}

TEST(ModelSpec, Gemma3LocalAndGlobalLayers) {
  Header h("gemma3");
  h.set("gemma3.attention.sliding_window", GgufValue::of_u32(1024));
  h.set("gemma3.rope.freq_base", GgufValue::of_f32(1e6f));
  h.set("gemma3.rope.scaling.factor", GgufValue::of_f32(8.0f));  // no type: linear
  const ModelSpec s = h.spec();
  EXPECT_FLOAT_EQ(s.embedding_scale, 16.0f);
  EXPECT_EQ(s.rope_scaling.kind, RopeScaling::Kind::Linear);
  for (int64_t l = 0; l < 12; ++l) {
    const auto& a = s.layers[size_t(l)].attention;
    const bool global = l == 5 || l == 11;
    EXPECT_EQ(a.window, global ? 0 : 1024) << l;
    EXPECT_FLOAT_EQ(a.rope.theta, global ? 1e6f : 10000.0f) << l;
    EXPECT_EQ(a.rope.scaling.kind, global ? RopeScaling::Kind::Linear : RopeScaling::Kind::None) << l;
  }
  EXPECT_EQ(s.layers[0].activation, FfnActivation::GeluTanh);
  EXPECT_EQ(layer_roles(s, 0).size(), 13u);
}

TEST(ModelSpec, Gemma3PatternFromTheFile) {
  Header period("gemma3", 4);
  period.set("gemma3.attention.sliding_window", GgufValue::of_u32(8));
  period.set("gemma3.attention.sliding_window_pattern", GgufValue::of_u32(2));
  const ModelSpec s = period.spec();
  EXPECT_EQ(s.layers[0].attention.window, 8);
  EXPECT_EQ(s.layers[1].attention.window, 0);

  Header flags("gemma3", 3);
  flags.set("gemma3.attention.sliding_window", GgufValue::of_u32(8));
  flags.set("gemma3.attention.sliding_window_pattern",
            GgufValue::of_array(GgufValueType::BOOL, {GgufValue::of_bool(false), GgufValue::of_bool(true),
                                                      GgufValue::of_bool(false)}));
  const ModelSpec f = flags.spec();
  EXPECT_EQ(f.layers[0].attention.window, 0);
  EXPECT_EQ(f.layers[1].attention.window, 8);

  Header short_list("gemma3", 3);
  short_list.set("gemma3.attention.sliding_window", GgufValue::of_u32(8));
  short_list.set("gemma3.attention.sliding_window_pattern",
                 GgufValue::of_array(GgufValueType::BOOL, {GgufValue::of_bool(true)}));
  EXPECT_EQ(test::error_of([&] { short_list.spec(); }),
            "model.gguf: metadata 'gemma3.attention.sliding_window_pattern' has 1 entries for 3 layers");
}

TEST(ModelSpec, Gemma3WithoutAWindowIsGlobal) {
  const ModelSpec s = Header("gemma3").spec();
  for (const LayerSpec& l : s.layers) EXPECT_EQ(l.attention.window, 0);
}

TEST(ModelSpec, LlamaWithExpertsIsMixtral) {
  Header h("llama");
  h.set("llama.expert_count", GgufValue::of_u32(8));
  h.set("llama.expert_used_count", GgufValue::of_u32(2));
  const ModelSpec s = h.spec();
  EXPECT_EQ(s.layers[11].moe, (MoeSpec{8, 2, 768}));  // every expert feed_forward_length wide
  EXPECT_TRUE(s.has_experts());
  EXPECT_FALSE(s.llama_layers());
  EXPECT_EQ(describe_layers(s), "mixture of 8 experts (2 used, FFN 768)");
  const auto roles = layer_roles(s, 0);
  EXPECT_EQ(std::vector<LayerRole>(roles.end() - 4, roles.end()),
            (std::vector<LayerRole>{LayerRole::FfnRouter, LayerRole::FfnGateExperts, LayerRole::FfnUpExperts,
                                    LayerRole::FfnDownExperts}));
  EXPECT_EQ(role_shape(s, LayerRole::FfnRouter, 3).rows, 8);
  const RoleShape down = role_shape(s, LayerRole::FfnDownExperts, 3);
  EXPECT_EQ((std::array{down.rows, down.cols, down.experts}), (std::array<int64_t, 3>{256, 768, 8}));
  EXPECT_EQ(role_tensor_name(2, LayerRole::FfnUpExperts), "blk.2.ffn_up_exps.weight");
  EXPECT_EQ(role_tensor_name(2, LayerRole::FfnRouter), "blk.2.ffn_gate_inp.weight");

  Header dense("llama");
  dense.set("llama.expert_count", GgufValue::of_u32(0));
  EXPECT_FALSE(dense.spec().has_experts());
}

TEST(ModelSpec, Qwen3MoeExpertsOfTheirOwnWidth) {
  Header h("qwen3moe");
  h.set("qwen3moe.expert_count", GgufValue::of_u32(16));
  h.set("qwen3moe.expert_used_count", GgufValue::of_u32(4));
  h.set("qwen3moe.expert_feed_forward_length", GgufValue::of_u32(128));
  const ModelSpec s = h.spec();
  EXPECT_EQ(s.layers[0].moe, (MoeSpec{16, 4, 128}));
  EXPECT_TRUE(s.layers[0].attention.qk_norm);
  EXPECT_EQ(s.rope_style, RopeStyle::Halves);
  EXPECT_EQ(describe_layers(s), "q/k norm, mixture of 16 experts (4 used, FFN 128), rope over halves");

  Header unsaid("qwen3moe");
  unsaid.set("qwen3moe.expert_count", GgufValue::of_u32(16));
  unsaid.set("qwen3moe.expert_used_count", GgufValue::of_u32(4));
  EXPECT_EQ(unsaid.spec().layers[0].moe.expert_ffn_dim, 768 / 4);  // the reference engine's default
}

// gpt-oss as the converter writes it: YaRN keys, a window, experts with their own width.
Header gpt_oss_header(int64_t layers = 4) {
  Header h("gpt-oss", layers);
  h.set("gpt-oss.expert_count", GgufValue::of_u32(32));
  h.set("gpt-oss.expert_used_count", GgufValue::of_u32(4));
  h.set("gpt-oss.expert_feed_forward_length", GgufValue::of_u32(128));
  h.set("gpt-oss.attention.sliding_window", GgufValue::of_u32(128));
  h.set("gpt-oss.rope.freq_base", GgufValue::of_f32(150000.0f));
  h.set("gpt-oss.rope.scaling.type", GgufValue::of_string("yarn"));
  h.set("gpt-oss.rope.scaling.factor", GgufValue::of_f32(32.0f));
  h.set("gpt-oss.rope.scaling.original_context_length", GgufValue::of_u32(4096));
  h.tensor("blk.0.attn_q.bias", {256});
  return h;
}

TEST(ModelSpec, GptOssLayers) {
  const ModelSpec s = gpt_oss_header().spec();
  EXPECT_EQ(s.rope_style, RopeStyle::Halves);
  EXPECT_EQ(s.rope_scaling.kind, RopeScaling::Kind::Yarn);
  EXPECT_FLOAT_EQ(s.rope_scaling.factor, 32.0f);
  EXPECT_EQ(s.rope_scaling.original_context, 4096);
  // Even layers slide (period 2 from the first), and keep the model's YaRN table.
  for (size_t l = 0; l < s.layers.size(); ++l) {
    const LayerSpec& layer = s.layers[l];
    EXPECT_EQ(layer.attention.window, l % 2 == 0 ? 128 : 0) << l;
    EXPECT_EQ(layer.attention.rope, s.rope()) << l;
    EXPECT_TRUE(layer.attention.qkv_bias && layer.attention.output_bias && layer.attention.sinks);
    EXPECT_EQ(layer.activation, FfnActivation::SwigluOai);
    EXPECT_EQ(layer.moe, (MoeSpec{32, 4, 128, ExpertGating::TopKSoftmax, true}));
  }
  EXPECT_EQ(describe_layers(s),
            "qkv bias, output bias, attention sinks, clamped SwiGLU, sliding window 128 (rope theta 150000) on 2 of 4 "
            "layers, mixture of 32 experts (4 used, FFN 128, biases, softmax over the chosen), rope over halves");
  const std::vector<LayerRole> roles = layer_roles(s, 1);
  using enum LayerRole;
  EXPECT_EQ(roles, (std::vector<LayerRole>{AttnNorm, AttnQ, AttnK, AttnV, AttnQBias, AttnKBias, AttnVBias, AttnSinks, AttnOutput,
                                           AttnOutputBias, FfnNormNamedPostAttention, FfnRouter, FfnGateExperts, FfnUpExperts,
                                           FfnDownExperts, FfnRouterBias, FfnGateExpertsBias, FfnUpExpertsBias,
                                           FfnDownExpertsBias}));
  EXPECT_EQ(role_tensor_name(1, FfnNormNamedPostAttention), "blk.1.post_attention_norm.weight");
  EXPECT_EQ(role_tensor_name(1, AttnSinks), "blk.1.attn_sinks.weight");
  EXPECT_EQ(role_tensor_name(1, FfnDownExpertsBias), "blk.1.ffn_down_exps.bias");
  EXPECT_EQ(role_shape(s, AttnSinks, 1).cols, 4);
  const RoleShape gate_bias = role_shape(s, FfnGateExpertsBias, 1);
  EXPECT_EQ((std::array{gate_bias.rows, gate_bias.cols, gate_bias.experts}), (std::array<int64_t, 3>{1, 128, 32}));
}

// YaRN over gpt-oss's 64 rotated dims: pairs below floor(64 ln(4096 / (32 * 2 pi)) / (2 ln 150000)) = 8
// keep their frequency, pairs from ceil(64 ln(4096 / (2 pi)) / (2 ln 150000)) = 18 on are divided by
// the factor, and a linear ramp blends between; every pair is scaled by 1 + 0.1 ln 32.
TEST(ModelSpec, YarnTableFollowsItsCorrectionRange) {
  const ModelSpec s = gpt_oss_header().spec();
  const std::vector<float> inv = rope_inv_freqs(s.rope(), 64, nullptr);
  ASSERT_EQ(inv.size(), 32u);
  for (int i = 0; i < 32; ++i) {
    const double trained = std::pow(150000.0, -2.0 * i / 64.0);
    const double keep = 1.0 - std::clamp((i - 8.0) / 10.0, 0.0, 1.0);
    EXPECT_NEAR(inv[size_t(i)], trained * (keep + (1.0 - keep) / 32.0), 1e-6 * trained) << i;
  }
  EXPECT_NEAR(rope_magnitude(s.rope()), 1.0 + 0.1 * std::log(32.0), 1e-6);
  EXPECT_EQ(rope_magnitude(Header("llama").spec().rope()), 1.0f);
}

TEST(ModelSpec, GptOssErrorsNameTheKey) {
  Header no_window("gpt-oss");
  no_window.set("gpt-oss.expert_count", GgufValue::of_u32(8));
  no_window.set("gpt-oss.expert_used_count", GgufValue::of_u32(2));
  no_window.set("gpt-oss.expert_feed_forward_length", GgufValue::of_u32(128));
  EXPECT_NE(test::error_of([&] { no_window.spec(); }).find("gpt-oss.attention.sliding_window"), std::string::npos);
  EXPECT_EQ(test::error_of([] { Header("gpt-oss").spec(); }), "model.gguf: metadata 'gpt-oss.expert_count' must be positive");
}

TEST(ModelSpec, ExpertErrorsNameTheKey) {
  EXPECT_EQ(test::error_of([] { Header("qwen3moe").spec(); }),
            "model.gguf: metadata 'qwen3moe.expert_count' must be positive");
  Header no_used("llama");
  no_used.set("llama.expert_count", GgufValue::of_u32(8));
  EXPECT_NE(test::error_of([&] { no_used.spec(); }).find("llama.expert_used_count"), std::string::npos);
  Header too_many("llama");
  too_many.set("llama.expert_count", GgufValue::of_u32(4));
  too_many.set("llama.expert_used_count", GgufValue::of_u32(5));
  EXPECT_NE(test::error_of([&] { too_many.spec(); }).find("expert_used_count must lie in [1, expert_count]"),
            std::string::npos);
}

TEST(ModelSpec, UnsupportedArchitectureListsTheSupported) {
  EXPECT_EQ(test::error_of([] { Header("mamba").spec(); }),
            "model.gguf: architecture 'mamba' is not supported (supported: llama, qwen2, qwen3, qwen3moe, gemma3, gpt-oss)");
}

TEST(ModelSpec, ErrorsNameTheKey) {
  Header h("qwen3");
  h.h.metadata.erase(h.h.metadata.begin() + 2);  // qwen3.embedding_length
  EXPECT_NE(test::error_of([&] { h.spec(); }).find("qwen3.embedding_length"), std::string::npos);
}

}  // namespace
}  // namespace nt

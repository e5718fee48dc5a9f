// Type selection for `quantize --type`: expected types are written out by
// hand from llama.cpp's conventions for the same model shapes.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "quant/quant_mix.h"

namespace nt {
namespace {

struct Model {
  int64_t n_layers, n_gqa;
  bool has_output;
};

TensorType pick(QuantScheme scheme, const Model& m, const std::string& name, std::vector<int64_t> shape) {
  return choose_tensor_type(scheme, TensorPlacementInfo{name, shape, m.n_layers, m.n_gqa, m.has_output});
}

std::string blk(int layer, const char* role) { return "blk." + std::to_string(layer) + "." + role + ".weight"; }

// Llama-3-8B: 32 layers, width 4096, FFN 14336, 8 KV heads of 32, vocab 128256.
constexpr Model kLlama3_8B{32, 4, true};
// Layers where Q4_K_M / Q5_K_M spend more bits on attn_v and ffn_down with 32 layers:
// the first 4, the last 4, and 6, 9, ..., 27.
const std::set<int> kMoreBits32 = {0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31};

TEST(QuantMix, Llama3_8B_Q4_K_M) {
  const auto s = QuantScheme::Q4_K_M;
  const auto& m = kLlama3_8B;
  EXPECT_EQ(pick(s, m, "token_embd.weight", {4096, 128256}), TensorType::Q4_K);
  EXPECT_EQ(pick(s, m, "output.weight", {4096, 128256}), TensorType::Q6_K);
  EXPECT_EQ(pick(s, m, "output_norm.weight", {4096}), TensorType::F32);
  EXPECT_EQ(pick(s, m, "rope_freqs.weight", {64}), TensorType::F32);
  for (int i = 0; i < 32; ++i) {
    const TensorType more = kMoreBits32.count(i) ? TensorType::Q6_K : TensorType::Q4_K;
    EXPECT_EQ(pick(s, m, blk(i, "attn_v"), {4096, 1024}), more) << i;
    EXPECT_EQ(pick(s, m, blk(i, "ffn_down"), {14336, 4096}), more) << i;
    EXPECT_EQ(pick(s, m, blk(i, "attn_q"), {4096, 4096}), TensorType::Q4_K);
    EXPECT_EQ(pick(s, m, blk(i, "attn_k"), {4096, 1024}), TensorType::Q4_K);
    EXPECT_EQ(pick(s, m, blk(i, "attn_output"), {4096, 4096}), TensorType::Q4_K);
    EXPECT_EQ(pick(s, m, blk(i, "ffn_gate"), {4096, 14336}), TensorType::Q4_K);
    EXPECT_EQ(pick(s, m, blk(i, "ffn_up"), {4096, 14336}), TensorType::Q4_K);
    EXPECT_EQ(pick(s, m, blk(i, "attn_norm"), {4096}), TensorType::F32);
    EXPECT_EQ(pick(s, m, blk(i, "ffn_norm"), {4096}), TensorType::F32);
  }
}

// A mixture of experts' router stays F32, as the reference engine's quantizer
// keeps it; the 3-D expert stacks take the base type by their row width.
TEST(QuantMix, RouterStaysF32AndExpertStacksTakeTheBaseType) {
  const Model mixtral{32, 4, true};
  for (const auto s : {QuantScheme::Q4_K_M, QuantScheme::Q8_0, QuantScheme::F16}) {
    EXPECT_EQ(pick(s, mixtral, blk(5, "ffn_gate_inp"), {4096, 8}), TensorType::F32);
  }
  EXPECT_EQ(pick(QuantScheme::Q4_K_M, mixtral, blk(5, "ffn_up_exps"), {4096, 14336, 8}), TensorType::Q4_K);
  EXPECT_EQ(pick(QuantScheme::F16, mixtral, blk(5, "ffn_down_exps"), {14336, 4096, 8}), TensorType::F16);
}

TEST(QuantMix, Llama3_8B_Q5_K_M) {
  const auto s = QuantScheme::Q5_K_M;
  const auto& m = kLlama3_8B;
  EXPECT_EQ(pick(s, m, "token_embd.weight", {4096, 128256}), TensorType::Q5_K);
  EXPECT_EQ(pick(s, m, "output.weight", {4096, 128256}), TensorType::Q6_K);
  for (int i = 0; i < 32; ++i) {
    const TensorType more = kMoreBits32.count(i) ? TensorType::Q6_K : TensorType::Q5_K;
    EXPECT_EQ(pick(s, m, blk(i, "attn_v"), {4096, 1024}), more) << i;
    EXPECT_EQ(pick(s, m, blk(i, "ffn_down"), {14336, 4096}), more) << i;
    EXPECT_EQ(pick(s, m, blk(i, "ffn_up"), {4096, 14336}), TensorType::Q5_K);
  }
}

TEST(QuantMix, Llama3_8B_OtherSchemes) {
  const auto& m = kLlama3_8B;
  // Plain types: every matrix in the type, but the output matrix in Q6_K (Q8_0 stays Q8_0).
  EXPECT_EQ(pick(QuantScheme::Q4_0, m, blk(5, "attn_v"), {4096, 1024}), TensorType::Q4_0);
  EXPECT_EQ(pick(QuantScheme::Q4_0, m, "token_embd.weight", {4096, 128256}), TensorType::Q4_0);
  EXPECT_EQ(pick(QuantScheme::Q4_0, m, "output.weight", {4096, 128256}), TensorType::Q6_K);
  EXPECT_EQ(pick(QuantScheme::Q8_0, m, "output.weight", {4096, 128256}), TensorType::Q8_0);
  EXPECT_EQ(pick(QuantScheme::Q6_K, m, blk(0, "ffn_down"), {14336, 4096}), TensorType::Q6_K);
  EXPECT_EQ(pick(QuantScheme::F16, m, "output.weight", {4096, 128256}), TensorType::F16);
  EXPECT_EQ(pick(QuantScheme::BF16, m, blk(3, "ffn_up"), {4096, 14336}), TensorType::BF16);
  EXPECT_EQ(pick(QuantScheme::BF16, m, blk(3, "ffn_norm"), {4096}), TensorType::F32);
  EXPECT_EQ(pick(QuantScheme::F32, m, blk(3, "ffn_up"), {4096, 14336}), TensorType::F32);
  // Q4_K_S: more bits for the first 4 attn_v and the first n/8 ffn_down.
  EXPECT_EQ(pick(QuantScheme::Q4_K_S, m, blk(3, "attn_v"), {4096, 1024}), TensorType::Q5_K);
  EXPECT_EQ(pick(QuantScheme::Q4_K_S, m, blk(4, "attn_v"), {4096, 1024}), TensorType::Q4_K);
  EXPECT_EQ(pick(QuantScheme::Q4_K_S, m, blk(3, "ffn_down"), {14336, 4096}), TensorType::Q5_K);
  EXPECT_EQ(pick(QuantScheme::Q4_K_S, m, blk(31, "ffn_down"), {14336, 4096}), TensorType::Q4_K);
  // Q3_K_M
  EXPECT_EQ(pick(QuantScheme::Q3_K_M, m, blk(1, "attn_v"), {4096, 1024}), TensorType::Q5_K);
  EXPECT_EQ(pick(QuantScheme::Q3_K_M, m, blk(2, "attn_v"), {4096, 1024}), TensorType::Q4_K);
  EXPECT_EQ(pick(QuantScheme::Q3_K_M, m, blk(1, "ffn_down"), {14336, 4096}), TensorType::Q5_K);
  EXPECT_EQ(pick(QuantScheme::Q3_K_M, m, blk(2, "ffn_down"), {14336, 4096}), TensorType::Q4_K);
  EXPECT_EQ(pick(QuantScheme::Q3_K_M, m, blk(2, "attn_output"), {4096, 4096}), TensorType::Q4_K);
  EXPECT_EQ(pick(QuantScheme::Q3_K_M, m, blk(2, "attn_q"), {4096, 4096}), TensorType::Q3_K);
  // Single-type K schemes: every matrix, output and embeddings included, is the base type.
  for (auto [scheme, type] : {std::pair{QuantScheme::Q2_K, TensorType::Q2_K}, std::pair{QuantScheme::Q4_K, TensorType::Q4_K},
                              std::pair{QuantScheme::Q6_K, TensorType::Q6_K}}) {
    EXPECT_EQ(pick(scheme, m, blk(7, "attn_v"), {4096, 1024}), type);
    EXPECT_EQ(pick(scheme, m, blk(7, "ffn_down"), {14336, 4096}), type);
    EXPECT_EQ(pick(scheme, m, "output.weight", {4096, 128256}), type);
    EXPECT_EQ(pick(scheme, m, "token_embd.weight", {4096, 128256}), type);
  }
}

TEST(QuantMix, Llama70BShapeGetsWiderAttnV) {
  const Model m{80, 8, true};
  // 80 layers: more_bits for 0-9, 70-79 and 12, 15, ..., 69.
  EXPECT_EQ(pick(QuantScheme::Q4_K_M, m, blk(0, "attn_v"), {8192, 1024}), TensorType::Q6_K);
  EXPECT_EQ(pick(QuantScheme::Q4_K_M, m, blk(12, "attn_v"), {8192, 1024}), TensorType::Q6_K);
  EXPECT_EQ(pick(QuantScheme::Q4_K_M, m, blk(10, "attn_v"), {8192, 1024}), TensorType::Q5_K);
  EXPECT_EQ(pick(QuantScheme::Q4_K_M, m, blk(10, "ffn_down"), {28672, 8192}), TensorType::Q4_K);
  EXPECT_EQ(pick(QuantScheme::Q3_K_S, m, blk(40, "attn_v"), {8192, 1024}), TensorType::Q5_K);
  EXPECT_EQ(pick(QuantScheme::Q5_K_M, m, blk(10, "attn_v"), {8192, 1024}), TensorType::Q5_K);
}

// SmolLM2-135M: 30 layers, width 576 (not a multiple of 256), FFN 1536,
// 9 query / 3 KV heads, vocab 49152, output tied to token_embd.
constexpr Model kSmolLM2{30, 3, false};
// more_bits with 30 layers: the first 3 (30/8), from 26 (7*30/8) on, and 5, 8, ..., 23.
const std::set<int> kMoreBits30 = {0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 26, 27, 28, 29};

TEST(QuantMix, SmolLM2_Q4_K_M_FallsBackWhereRowsAre576) {
  const auto s = QuantScheme::Q4_K_M;
  const auto& m = kSmolLM2;
  // Tied embeddings are the output matrix: Q6_K would need 256 | 576, so Q8_0.
  EXPECT_EQ(pick(s, m, "token_embd.weight", {576, 49152}), TensorType::Q8_0);
  for (int i = 0; i < 30; ++i) {
    const bool more = kMoreBits30.count(i) > 0;
    EXPECT_EQ(pick(s, m, blk(i, "attn_v"), {576, 192}), more ? TensorType::Q8_0 : TensorType::Q5_0) << i;
    EXPECT_EQ(pick(s, m, blk(i, "ffn_down"), {1536, 576}), more ? TensorType::Q6_K : TensorType::Q4_K) << i;
    EXPECT_EQ(pick(s, m, blk(i, "attn_q"), {576, 576}), TensorType::Q5_0);
    EXPECT_EQ(pick(s, m, blk(i, "attn_output"), {576, 576}), TensorType::Q5_0);
    EXPECT_EQ(pick(s, m, blk(i, "ffn_gate"), {576, 1536}), TensorType::Q5_0);
    EXPECT_EQ(pick(s, m, blk(i, "attn_norm"), {576}), TensorType::F32);
  }
}

TEST(QuantMix, SmolLM2_OtherSchemes) {
  const auto& m = kSmolLM2;
  EXPECT_EQ(pick(QuantScheme::Q5_K_M, m, blk(4, "attn_q"), {576, 576}), TensorType::Q5_1);
  EXPECT_EQ(pick(QuantScheme::Q5_K_M, m, blk(4, "attn_v"), {576, 192}), TensorType::Q5_1);
  EXPECT_EQ(pick(QuantScheme::Q5_K_M, m, blk(5, "attn_v"), {576, 192}), TensorType::Q8_0);
  EXPECT_EQ(pick(QuantScheme::Q6_K, m, blk(5, "attn_k"), {576, 192}), TensorType::Q8_0);
  EXPECT_EQ(pick(QuantScheme::Q2_K, m, blk(5, "attn_k"), {576, 192}), TensorType::Q4_0);
  EXPECT_EQ(pick(QuantScheme::Q3_K_L, m, blk(5, "attn_k"), {576, 192}), TensorType::Q4_0);
  EXPECT_EQ(pick(QuantScheme::Q3_K_L, m, blk(5, "attn_v"), {576, 192}), TensorType::Q5_1);
  // Legacy schemes fit 576; the tied output still gets Q6_K -> Q8_0.
  EXPECT_EQ(pick(QuantScheme::Q4_0, m, blk(5, "attn_k"), {576, 192}), TensorType::Q4_0);
  EXPECT_EQ(pick(QuantScheme::Q4_0, m, "token_embd.weight", {576, 49152}), TensorType::Q8_0);
  EXPECT_EQ(pick(QuantScheme::Q4_0, Model{30, 3, true}, "token_embd.weight", {576, 49152}), TensorType::Q4_0);
}

TEST(QuantMix, WidthsThatFitNoBlockFallBackToF16) {
  const Model m{4, 1, true};
  EXPECT_EQ(pick(QuantScheme::Q4_K_M, m, blk(1, "attn_q"), {100, 100}), TensorType::F16);
  EXPECT_EQ(pick(QuantScheme::Q4_0, m, blk(1, "attn_q"), {100, 100}), TensorType::F16);
  EXPECT_EQ(pick(QuantScheme::Q8_0, m, "output.weight", {100, 1000}), TensorType::F16);
  EXPECT_EQ(pick(QuantScheme::Q4_K_M, m, "output.weight", {96, 1000}), TensorType::Q8_0);
  EXPECT_EQ(pick(QuantScheme::Q4_K_M, m, "output.weight", {4096, 1}), TensorType::F32);  // a vector
}

TEST(QuantMix, RejectsLayerOutsideModel) {
  EXPECT_THROW(pick(QuantScheme::Q4_K_M, Model{4, 1, true}, blk(4, "attn_v"), {256, 256}), Error);
}

TEST(QuantMix, SchemeNames) {
  EXPECT_EQ(quant_scheme_from_name("q4_k_m"), QuantScheme::Q4_K_M);
  EXPECT_EQ(quant_scheme_from_name("Q4_K"), QuantScheme::Q4_K);
  EXPECT_EQ(quant_scheme_from_name("q5_k"), QuantScheme::Q5_K);
  EXPECT_EQ(quant_scheme_from_name("Q3_K"), QuantScheme::Q3_K);
  EXPECT_EQ(quant_scheme_from_name("q8_0"), QuantScheme::Q8_0);
  EXPECT_EQ(quant_scheme_from_name("bf16"), QuantScheme::BF16);
  EXPECT_EQ(quant_scheme_from_name("iq4_nl"), std::nullopt);
  EXPECT_EQ(quant_scheme_from_name(""), std::nullopt);
  // GGUF general.file_type values of llama.cpp's LLAMA_FTYPE_MOSTLY_*.
  EXPECT_EQ(quant_scheme_info(QuantScheme::Q4_K_M).file_type, 15u);
  EXPECT_EQ(quant_scheme_info(QuantScheme::Q5_K_M).file_type, 17u);
  EXPECT_EQ(quant_scheme_info(QuantScheme::Q8_0).file_type, 7u);
  EXPECT_EQ(quant_scheme_info(QuantScheme::BF16).file_type, 32u);
  for (const auto& info : quant_schemes()) {
    EXPECT_EQ(quant_scheme_from_name(info.name), info.scheme) << info.name;
  }
}

}  // namespace
}  // namespace nt

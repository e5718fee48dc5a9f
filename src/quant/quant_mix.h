// Which type each tensor gets when a model is quantized with `--type NAME`.
//
// The schemes and rules follow the conventions of llama.cpp's quantizer, so
// our files have the same tensor types as the GGUF files people know:
//
//  * Tensors that are not matrices (no dimension past the first above 1: norms, rope
//    factors), "*_norm.weight" and a mixture of experts' router
//    ("*ffn_gate_inp.weight", whose logits choose the experts) stay F32.
//    F32/F16/BF16 schemes store every other matrix in that type.
//  * The plain K types (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) store every matrix in
//    that type, embeddings and output included: the "every matrix Q4_K" files
//    benchmarks are quoted on.
//  * The legacy types (Q4_0 ... Q8_0) and the mixes (Q3_K_S/M/L, Q4_K_S/M,
//    Q5_K_S/M) give matrices the base type, except:
//    - output.weight, and token_embd.weight when the model has no separate
//      output.weight (tied embeddings): Q6_K, or Q8_0 when the base type is
//      Q8_0 or its block does not divide the row width.
//    - blk.N.attn_v.weight:  Q3_K_M -> Q5_K for N < 2, else Q4_K
//                            Q3_K_L -> Q5_K
//                            Q4_K_S -> Q5_K for N < 4
//                            Q4_K_M, Q5_K_M -> Q6_K where more_bits(N)
//      and in 70B-shaped models (80 layers, grouped-query attention) a
//      resulting Q3_K/Q4_K becomes Q5_K (attn_v is 8x smaller there).
//    - blk.N.ffn_down.weight: Q3_K_M -> Q5_K for N < n_layers/16, else Q4_K
//                            Q3_K_L -> Q5_K
//                            Q4_K_S -> Q5_K for N < n_layers/8
//                            Q4_K_M, Q5_K_M -> Q6_K where more_bits(N)
//    - blk.N.attn_output.weight: Q3_K_M -> Q4_K, Q3_K_L -> Q5_K
//    more_bits(N) holds for the first and last eighth of the layers and for
//    every third layer in between: N < L/8 || N >= 7L/8 || (N - L/8) % 3 == 2.
//  * Fallback when the chosen type's block does not divide the row width
//    (shape[0]): Q2_K/Q3_K -> Q4_0 (llama.cpp uses IQ4_NL, which we lack),
//    Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0; a legacy type whose 32 does not
//    divide the width -> F16.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "quant/tensor_type.h"

namespace nt {

enum class QuantScheme {
  F32, F16, BF16,
  Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
  Q2_K, Q3_K, Q4_K, Q5_K, Q6_K,
  Q3_K_S, Q3_K_M, Q3_K_L, Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M,
};

struct QuantSchemeInfo {
  QuantScheme scheme;
  std::string_view name;   // "Q4_K_M"
  TensorType base_type;    // the type most matrices get
  bool mix;                // per-tensor rules apply; false: every matrix is base_type (plain K types)
  uint32_t file_type;      // GGUF general.file_type (llama.cpp's LLAMA_FTYPE numbering)
};

std::span<const QuantSchemeInfo> quant_schemes();
const QuantSchemeInfo& quant_scheme_info(QuantScheme scheme);

// Case-insensitive. Unlike llama.cpp, "Q3_K", "Q4_K", "Q5_K" name the single-type
// schemes; the mixes always carry their _S/_M/_L suffix.
std::optional<QuantScheme> quant_scheme_from_name(std::string_view name);

// What the rules need to know about one tensor and its model.
struct TensorPlacementInfo {
  std::string_view name;           // GGUF name, e.g. "blk.3.attn_v.weight"
  std::span<const int64_t> shape;  // GGUF order: shape[0] is the row width
  int64_t n_layers = 0;            // the model's block count
  int64_t n_gqa = 1;               // n_head / n_head_kv
  bool has_output = true;          // false when token_embd doubles as the output matrix
};

// The type to store the tensor in; throws nt::Error if a layer tensor's index
// is not below n_layers.
TensorType choose_tensor_type(QuantScheme scheme, const TensorPlacementInfo& tensor);

}  // namespace nt

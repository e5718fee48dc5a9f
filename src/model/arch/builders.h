// One builder per architecture: GGUF metadata into a ModelSpec. Each reads
// the keys under its own prefix ("qwen3.block_count", ...); read_model_spec
// picks the builder and validates what it returns.
#pragma once

#include <string_view>
#include <vector>

#include "model/arch/model_spec.h"

namespace nt::arch {

// The hyperparameters every family shares (dimensions, norm epsilon, the
// model's RoPE table), read under "<architecture>.", with Llama layers.
ModelSpec read_common(const GgufHeader& header, std::string_view architecture);

// Which layers slide: "<architecture>.attention.sliding_window_pattern" is a
// period n (layer i slides unless i % n == n - 1; 0: every layer) or one flag
// per layer; absent, the family's period.
std::vector<bool> read_sliding_layers(const GgufHeader& header, std::string_view architecture, int64_t n_layers,
                                      int64_t default_period);

// The mixture of experts of "<architecture>.expert_count" experts (none when
// the key is absent or 0), each `expert_ffn_dim` wide, on every layer of `spec`.
void read_experts(const GgufHeader& header, int64_t expert_ffn_dim, ModelSpec& spec);

ModelSpec build_llama(const GgufHeader& header);
ModelSpec build_qwen2(const GgufHeader& header);
ModelSpec build_qwen3(const GgufHeader& header);
ModelSpec build_qwen3moe(const GgufHeader& header);
ModelSpec build_gemma3(const GgufHeader& header);
ModelSpec build_gpt_oss(const GgufHeader& header);

}  // namespace nt::arch

// One builder per architecture: GGUF metadata into a ModelSpec. Each reads
// the keys under its own prefix ("qwen3.block_count", ...); read_model_spec
// picks the builder and validates what it returns.
#pragma once

#include <string_view>

#include "model/arch/model_spec.h"

namespace nt::arch {

// The hyperparameters every family shares (dimensions, norm epsilon, the
// model's RoPE table), read under "<architecture>.", with Llama layers.
ModelSpec read_common(const GgufHeader& header, std::string_view architecture);

// The mixture of experts of "<architecture>.expert_count" experts (none when
// the key is absent or 0), each `expert_ffn_dim` wide, on every layer of `spec`.
void read_experts(const GgufHeader& header, int64_t expert_ffn_dim, ModelSpec& spec);

ModelSpec build_llama(const GgufHeader& header);
ModelSpec build_qwen2(const GgufHeader& header);
ModelSpec build_qwen3(const GgufHeader& header);
ModelSpec build_qwen3moe(const GgufHeader& header);
ModelSpec build_gemma3(const GgufHeader& header);

}  // namespace nt::arch

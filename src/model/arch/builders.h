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

ModelSpec build_llama(const GgufHeader& header);
ModelSpec build_qwen2(const GgufHeader& header);
ModelSpec build_qwen3(const GgufHeader& header);
ModelSpec build_gemma3(const GgufHeader& header);

}  // namespace nt::arch

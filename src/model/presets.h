// Shapes and metadata of real architectures (Llama, Mixtral, Qwen2, Qwen3, Qwen3-MoE, Gemma 3), for random-weight
// benchmark and test models (`ntransformer make-model`).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/arch/model_spec.h"
#include "tokenizer/synthetic_vocab.h"

namespace nt {

struct ModelPreset {
  std::string name;      // "llama3-8b"
  ModelSpec config;    // what the family's builder reads back from the written file
  SyntheticVocabStyle vocab;  // specials, pre-tokenizer and chat template of the family
};

std::optional<ModelPreset> find_model_preset(std::string_view name);
std::vector<std::string> model_preset_names();

}  // namespace nt

// Shapes and metadata of real Llama-family architectures, for random-weight
// benchmark and test models (`ntransformer make-model`).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/llama_config.h"
#include "tokenizer/synthetic_vocab.h"

namespace nt {

struct ModelPreset {
  std::string name;      // "llama3-8b"
  LlamaConfig config;    // architecture "llama"
  SyntheticVocabStyle vocab;  // specials, pre-tokenizer and chat template of the family
};

std::optional<ModelPreset> find_model_preset(std::string_view name);
std::vector<std::string> model_preset_names();

}  // namespace nt

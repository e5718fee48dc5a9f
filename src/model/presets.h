// Shapes and metadata of real Llama-family architectures, for random-weight
// benchmark and test models (`ntransformer make-model`).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/llama_config.h"

namespace nt {

struct ModelPreset {
  std::string name;      // "llama3-8b"
  LlamaConfig config;    // architecture "llama"
  std::string tokenizer_pre;  // "llama-bpe" or "smollm"
  std::string chat_template;  // the architecture's template text
};

std::optional<ModelPreset> find_model_preset(std::string_view name);
std::vector<std::string> model_preset_names();

}  // namespace nt

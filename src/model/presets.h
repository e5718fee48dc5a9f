// Shapes and metadata of real architectures (Llama, Mixtral, Qwen2, Qwen3, Qwen3-MoE, Gemma 3, gpt-oss), for random-weight
// benchmark and test models (`ntransformer make-model`).
#pragma once

#include <optional>

#include "quant/tensor_type.h"
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
  // The format the family's converter stores the experts' matrices in whatever
  // the file's type (gpt-oss: MXFP4, as its checkpoints ship them); none: the file's.
  std::optional<TensorType> expert_type = std::nullopt;
};

std::optional<ModelPreset> find_model_preset(std::string_view name);
std::vector<std::string> model_preset_names();

}  // namespace nt

// Converts a llama2.c checkpoint and its tokenizer into a GGUF llama model
// with a SentencePiece vocabulary, so everything downstream sees only GGUF.
#pragma once

#include <string>

namespace nt {

void convert_llama2c(const std::string& model_path, const std::string& tokenizer_path, const std::string& out_path);

}  // namespace nt

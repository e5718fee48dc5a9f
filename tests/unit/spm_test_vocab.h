// A SentencePiece ("llama") vocabulary for tokenizer tests: <unk> <s> </s>,
// the 256 byte-fallback tokens <0x00>..<0xFF> (ids 3..258), then `pieces` as
// normal tokens from id 259, every score 0.
#pragma once

#include <fmt/format.h>

#include <initializer_list>

#include "tokenizer/vocab.h"

namespace nt::test {

inline VocabSpec byte_fallback_spm_vocab(std::initializer_list<const char*> pieces) {
  VocabSpec spec;
  spec.model = "llama";
  spec.tokens = {"<unk>", "<s>", "</s>"};
  spec.token_types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    spec.tokens.push_back(fmt::format("<0x{:02X}>", b));
    spec.token_types.push_back(6);
  }
  for (const char* piece : pieces) {
    spec.tokens.push_back(piece);
    spec.token_types.push_back(1);
  }
  spec.scores.assign(spec.tokens.size(), 0.0f);
  return spec;
}

}  // namespace nt::test

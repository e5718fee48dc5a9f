// Synthetic byte-level BPE vocabularies for random-weight test models: the right
// size and special tokens for a model family, and merges that behave like trained
// ones (every token is what BPE produces from its own bytes), so text tokenizes into
// plausible pieces and round-trips. Deterministic: same arguments, same vocabulary.
#pragma once

#include <cstdint>
#include <string_view>

#include "tokenizer/vocab.h"

namespace nt {

enum class SyntheticVocabStyle {
  SmolLM2,  // 17 specials first (<|endoftext|>, <|im_start|>, <|im_end|>, ...), pre "smollm", ChatML
  Llama3,   // 256 specials last (<|begin_of_text|> = n_vocab - 256, ...), pre "llama-bpe", Llama 3 chat
};

// Exactly `n_vocab` tokens: the style's specials, the 256 byte symbols, and one token per
// merge. Every merge joins two existing tokens into a new one. The spec also carries the
// style's special ids, flags, `pre` and chat template, ready to be written as GGUF metadata.
// Fails when n_vocab cannot hold the specials and byte symbols.
VocabSpec make_synthetic_bpe_vocab(int32_t n_vocab, SyntheticVocabStyle style);

// The reference chat templates (Jinja source) the synthetic vocabularies carry.
extern const std::string_view kSmolLM2ChatTemplate;
extern const std::string_view kLlama3ChatTemplate;

}  // namespace nt

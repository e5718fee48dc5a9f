// Synthetic vocabularies for random-weight test models: the right size, special tokens,
// flags and chat template for a model family, and merges that behave like trained ones
// (every token is what the family's algorithm produces from its own text), so text
// tokenizes into plausible pieces and round-trips. Deterministic: same arguments, same
// vocabulary.
#pragma once

#include <cstdint>
#include <string_view>

#include "tokenizer/vocab.h"

namespace nt {

enum class SyntheticVocabStyle {
  SmolLM2,  // byte-level BPE; 17 specials first (<|endoftext|>, <|im_start|>, <|im_end|>, ...), pre "smollm", ChatML
  Llama3,   // byte-level BPE; 256 specials last (<|begin_of_text|> = n_vocab - 256, ...), pre "llama-bpe", Llama 3 chat
  // Byte-level BPE, pre "qwen2" (each digit alone). Up to 151643 regular tokens, then Qwen2.5's 22
  // added tokens (<|endoftext|>, <|im_start|>, <|im_end|>, ..., <|file_sep|>), then "[PADn]" unused
  // tokens up to n_vocab, as in the real 151936-token vocabulary. EOS <|im_end|>, no BOS added,
  // Qwen2.5-Instruct's ChatML template.
  Qwen2,
  // Qwen2's vocabulary plus Qwen3's <tool_response>, </tool_response>, <think>, </think> (user
  // defined, so always matched in text), with Qwen3's template.
  Qwen3,
  // SentencePiece ("llama") with byte fallback, no dummy-prefix space, BOS added:
  // <pad> <eos> <bos> <unk> = 0..3, <start_of_turn> = 105, <end_of_turn> = 106 as in Gemma 3,
  // user-defined runs of newlines, spaces and tabs, the <0xXX> bytes, merged pieces, then
  // single characters. Gemma 3's chat template.
  Gemma3,
  // Byte-level BPE, pre "gpt-4o" (o200k_harmony's split), harmony's 15 specials last
  // (<|startoftext|> ... <|call|>, with the reserved ones between), no BOS added, EOS <|return|>,
  // <|call|> ending a tool call, gpt-oss's harmony chat template.
  GptOss,
};

// Exactly `n_vocab` tokens in the style's layout, with its special ids, flags, `pre` and
// chat template, ready to be written as GGUF metadata. Fails when n_vocab cannot hold the
// style's fixed tokens.
VocabSpec make_synthetic_vocab(int32_t n_vocab, SyntheticVocabStyle style);

// The byte-level BPE styles only (every style but Gemma3): the style's specials, the 256
// byte symbols, and one token per merge. Every merge joins two existing tokens into a new one.
VocabSpec make_synthetic_bpe_vocab(int32_t n_vocab, SyntheticVocabStyle style);

// The reference chat templates (Jinja source) the synthetic vocabularies carry.
extern const std::string_view kSmolLM2ChatTemplate;
extern const std::string_view kLlama3ChatTemplate;
extern const std::string_view kQwen25ChatTemplate;
extern const std::string_view kQwen3ChatTemplate;
extern const std::string_view kGemma3ChatTemplate;
extern const std::string_view kGptOssChatTemplate;

}  // namespace nt

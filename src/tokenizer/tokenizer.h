// Text <-> token ids for a GGUF vocabulary: SentencePiece ("llama") or byte-level
// BPE ("gpt2"), with special-token parsing, BOS/EOS handling and decoding.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/bpe_encoder.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/special_tokens.h"
#include "tokenizer/vocab.h"

namespace nt {

struct GgufHeader;

class Tokenizer {
 public:
  explicit Tokenizer(VocabSpec spec, std::string_view source = "vocabulary");
  // Reads the `tokenizer.*` metadata; `source` (the file path) names it in errors.
  static Tokenizer from_gguf(const GgufHeader& header, std::string_view source);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) = delete;
  Tokenizer(const Tokenizer&) = delete;

  // add_special: BOS/EOS as the vocabulary's add_bos/add_eos flags say.
  // parse_special: control-token strings in `text` (e.g. "<|im_start|>") become those
  // tokens; otherwise they are tokenized as plain text.
  std::vector<int32_t> encode(std::string_view text, bool add_special = true, bool parse_special = false) const;

  // Concatenated token bytes (not necessarily valid UTF-8: a split character stays split).
  // skip_special drops control and unknown tokens. The first piece goes through
  // piece_bytes(id, true), which removes SentencePiece's dummy-prefix space.
  std::string decode(std::span<const int32_t> ids, bool skip_special = true) const;

  // The raw bytes one token stands for ("▁" as a space, <0xXX> as its byte, byte-level
  // symbols as their bytes); control tokens give their text.
  std::string token_bytes(int32_t id) const;
  // token_bytes, except that the first piece of a decoded text loses the space that
  // SentencePiece's dummy prefix put there (only a "▁" of a normal piece, as sentencepiece does).
  std::string piece_bytes(int32_t id, bool first_piece) const;
  // Whether decoding with skip_special drops this token.
  bool is_special(int32_t id) const;

  const Vocabulary& vocab() const { return vocab_; }
  int32_t size() const { return vocab_.size(); }
  // The pre-tokenizer rule set in use (byte-level BPE only; "" for SentencePiece).
  std::string rules() const { return pre_ ? pre_->rules() : std::string(); }
  // Non-fatal problems found while loading (e.g. an unknown pre-tokenizer name).
  const std::vector<std::string>& warnings() const { return warnings_; }

 private:
  void encode_text(std::string_view text, bool at_text_start, std::vector<int32_t>& out) const;

  Vocabulary vocab_;
  SpecialTokenMatcher specials_;
  std::unique_ptr<PreTokenizer> pre_;         // byte-level BPE only
  std::unique_ptr<ByteLevelBpeEncoder> bpe_;  // byte-level BPE only
  std::vector<std::string> warnings_;
};

}  // namespace nt

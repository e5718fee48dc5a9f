// Incremental detokenization for streaming output: feed token ids one at a time and
// get back only complete UTF-8 characters. A character whose bytes are spread over
// several tokens (an emoji as byte-fallback or byte-level pieces) is held back until
// its last byte arrives; malformed bytes come out as U+FFFD. Text that continues
// a context (a prompt) keeps the space of its first SentencePiece piece, which only
// the start of a text loses.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace nt {

class TokenStreamDecoder {
 public:
  // The tokenizer must outlive the decoder. skip_special as in Tokenizer::decode.
  explicit TokenStreamDecoder(const Tokenizer& tokenizer, bool skip_special = true);

  // Special tokens that are not skipped: their text is output (a reply parser reads them).
  void keep_special(std::span<const int32_t> ids);
  // The tokens pushed next continue `context` (e.g. the prompt they were generated
  // from): they decode as the end of Tokenizer::decode(context + pushed), past the
  // context's own text. A context of skipped special tokens only (BOS) starts no text.
  void continue_after(std::span<const int32_t> context);
  // Text that became complete with this token (often empty, or several characters).
  std::string push(int32_t id);
  // Everything still held back, with an unfinished character as U+FFFD; then reset.
  std::string flush();
  // The next token starts a new text.
  void reset();

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_;
  std::vector<int32_t> kept_;  // sorted
  bool skipped(int32_t id) const;

  bool at_start_ = true;  // the next token is the first piece of the text
  std::string pending_;   // bytes of an unfinished character
};

}  // namespace nt

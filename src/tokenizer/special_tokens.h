// Finds special-token strings (e.g. "<|im_start|>") in text so they become single
// tokens instead of being spelled out. Control and unknown tokens are matched only
// when the caller asks (chat prompts); user-defined tokens are always matched, as
// the reference tokenizers do.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace nt {

// A stretch of input: plain text, or one matched special token.
struct TextFragment {
  std::string_view text;
  int32_t token = kNoToken;  // kNoToken: plain text to tokenize
};

class SpecialTokenMatcher {
 public:
  explicit SpecialTokenMatcher(const Vocabulary& vocab);

  // Splits `text` at special tokens, leftmost-longest first; appends to `out`.
  void split(std::string_view text, bool parse_special, std::vector<TextFragment>& out) const;

 private:
  struct Candidate {
    std::string_view text;  // points into the vocabulary, which outlives the matcher's use
    int32_t id;
    bool always;  // user-defined: matched even without parse_special
  };
  const Candidate* match_at(std::string_view text, size_t pos, bool parse_special) const;

  std::array<std::vector<Candidate>, 256> by_first_byte_;  // longest first
  bool any_always_ = false;
};

}  // namespace nt

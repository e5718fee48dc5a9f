// Regex pre-tokenization for byte-level BPE: the text is cut into pieces (words,
// numbers, punctuation runs, whitespace) before merges run, so no token spans a cut.
// Which rules apply is named by `tokenizer.ggml.pre`. Matching uses PCRE2 in UTF mode
// with Unicode properties; invalid UTF-8 never matches and is kept as its own piece.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace nt {

class PreTokenizer {
 public:
  // Unknown names fall back to GPT-2's rules and set warning().
  explicit PreTokenizer(std::string_view pre_name);
  ~PreTokenizer();
  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;

  // The rule set in use: "gpt2", "llama3", "qwen2" or "smollm".
  const std::string& rules() const { return rules_; }
  // Whether a piece that is itself a token skips the merges (as Llama 3 does).
  bool ignore_merges() const { return ignore_merges_; }
  const std::string& warning() const { return warning_; }

  // Appends the pieces of `text` to `pieces`, in order, covering it exactly.
  void split(std::string_view text, std::vector<std::string_view>& pieces) const;

 private:
  struct Regex;
  std::vector<std::unique_ptr<Regex>> stages_;  // applied in turn, each to the previous stage's pieces
  std::string rules_;
  std::string warning_;
  bool ignore_merges_ = false;
};

}  // namespace nt

// Small UTF-8 helpers shared by the tokenizers and the streaming decoder.
// Text reaching the tokenizer may be invalid UTF-8; nothing here throws, and
// malformed bytes are reported so callers can fall back to byte tokens or U+FFFD.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace nt::utf8 {

constexpr char32_t kReplacementChar = 0xFFFD;

enum class SequenceStatus {
  Valid,      // a complete, shortest-form, non-surrogate sequence of `length` bytes
  Truncated,  // a valid start cut short by the end of the text: `length` bytes so far
  Invalid,    // malformed: `length` bytes form one maximal ill-formed subpart
};

struct Sequence {
  SequenceStatus status;
  size_t length;
};

// Classifies the sequence starting at `text[pos]` (pos < text.size()).
Sequence check_sequence(std::string_view text, size_t pos);

// Length of the unit starting at `text[pos]`: a valid sequence, or 1 for a bad byte.
inline size_t unit_length(std::string_view text, size_t pos) {
  Sequence s = check_sequence(text, pos);
  return s.status == SequenceStatus::Valid ? s.length : 1;
}

void append_code_point(std::string& out, char32_t cp);

inline std::string encode(char32_t cp) {
  std::string s;
  append_code_point(s, cp);
  return s;
}

// Decodes the valid sequence of `length` bytes at `text[pos]`.
char32_t decode_at(std::string_view text, size_t pos, size_t length);

// Appends `text` to `out` with each maximal ill-formed subpart replaced by U+FFFD
// (the same policy as Python's errors="replace"). When `keep_truncated_tail` is set, a
// valid but incomplete sequence at the very end is not appended; the return value is
// the number of bytes consumed.
size_t append_valid(std::string_view text, std::string& out, bool keep_truncated_tail = false);

inline std::string to_valid(std::string_view text) {
  std::string out;
  append_valid(text, out);
  return out;
}

}  // namespace nt::utf8

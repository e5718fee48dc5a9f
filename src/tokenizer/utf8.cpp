#include "tokenizer/utf8.h"

#include <cstdint>

namespace nt::utf8 {
namespace {

bool is_continuation(uint8_t b) { return (b & 0xC0) == 0x80; }

// Expected length from the lead byte, and the allowed range of the second byte
// (which is what rules out overlong forms, surrogates and code points > U+10FFFF).
struct LeadInfo {
  size_t length;  // 0: not a lead byte
  uint8_t second_min, second_max;
};

LeadInfo lead_info(uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b >= 0xE1 && b <= 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

}  // namespace

Sequence check_sequence(std::string_view text, size_t pos) {
  LeadInfo info = lead_info(uint8_t(text[pos]));
  if (info.length == 0) return {SequenceStatus::Invalid, 1};
  size_t n = 1;
  while (n < info.length && pos + n < text.size()) {
    auto b = uint8_t(text[pos + n]);
    bool ok = n == 1 ? (b >= info.second_min && b <= info.second_max) : is_continuation(b);
    if (!ok) return {SequenceStatus::Invalid, n};
    ++n;
  }
  if (n == info.length) return {SequenceStatus::Valid, n};
  return {SequenceStatus::Truncated, n};
}

void append_code_point(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

char32_t decode_at(std::string_view text, size_t pos, size_t length) {
  auto b0 = uint8_t(text[pos]);
  if (length == 1) return b0;
  static constexpr uint8_t kLeadMask[5] = {0, 0, 0x1F, 0x0F, 0x07};
  char32_t cp = b0 & kLeadMask[length];
  for (size_t i = 1; i < length; ++i) cp = (cp << 6) | (uint8_t(text[pos + i]) & 0x3F);
  return cp;
}

size_t append_valid(std::string_view text, std::string& out, bool keep_truncated_tail) {
  size_t pos = 0;
  while (pos < text.size()) {
    Sequence s = check_sequence(text, pos);
    if (s.status == SequenceStatus::Truncated && keep_truncated_tail) break;
    if (s.status == SequenceStatus::Valid) {
      out.append(text.substr(pos, s.length));
    } else {
      append_code_point(out, kReplacementChar);
    }
    pos += s.length;
  }
  return pos;
}

}  // namespace nt::utf8

#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/utf8.h"

namespace nt::byte_level {
namespace {

// Printable Latin-1 bytes stand for themselves; the other 68 bytes (controls,
// space, DEL, NBSP, soft hyphen...) take the code points from U+0100 upwards in order.
bool is_self_mapped(int b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); }

struct Tables {
  std::array<std::string, 256> symbol;
  std::array<int16_t, 324> byte_of_code_point;  // code points < 0x144 cover the alphabet; -1 = not in it

  Tables() {
    byte_of_code_point.fill(-1);
    int next_extra = 0x100;
    for (int b = 0; b < 256; ++b) {
      char32_t cp = is_self_mapped(b) ? char32_t(b) : char32_t(next_extra++);
      symbol[b] = utf8::encode(cp);
      byte_of_code_point[cp] = int16_t(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

const std::string& byte_to_symbol(uint8_t byte) { return tables().symbol[byte]; }

void encode(std::string_view bytes, std::string& out) {
  const auto& t = tables();
  for (char c : bytes) out += t.symbol[uint8_t(c)];
}

std::optional<std::string> decode(std::string_view symbols) {
  const auto& t = tables();
  std::string out;
  out.reserve(symbols.size());
  for (size_t i = 0; i < symbols.size();) {
    utf8::Sequence seq = utf8::check_sequence(symbols, i);
    if (seq.status != utf8::SequenceStatus::Valid) return std::nullopt;
    size_t n = seq.length;
    char32_t cp = utf8::decode_at(symbols, i, n);
    if (cp >= t.byte_of_code_point.size() || t.byte_of_code_point[cp] < 0) return std::nullopt;
    out += char(t.byte_of_code_point[cp]);
    i += n;
  }
  return out;
}

}  // namespace nt::byte_level

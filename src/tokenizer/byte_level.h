// GPT-2's reversible byte <-> Unicode mapping used by byte-level BPE vocabularies:
// each byte is shown as one printable code point ("Ġ" for a space, "Ċ" for '\n'),
// so every token string is valid UTF-8 whatever bytes it stands for.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace nt::byte_level {

// The UTF-8 spelling (1 or 2 bytes) of the code point that stands for `byte`.
const std::string& byte_to_symbol(uint8_t byte);

// Appends the byte-level spelling of raw `bytes` to `out`.
void encode(std::string_view bytes, std::string& out);

// The raw bytes a byte-level token spells, or nullopt when it contains a code point
// outside the 256-symbol alphabet (e.g. an added token stored verbatim).
std::optional<std::string> decode(std::string_view symbols);

}  // namespace nt::byte_level

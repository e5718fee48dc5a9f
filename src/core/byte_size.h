// Byte sizes as people type them on the command line ("24GiB", "512MiB",
// "1.5GB", "800M") and as we print them back.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace nt {

// Parses a non-negative size. Units (case-insensitive, optional space before):
//   none or B             bytes
//   KiB MiB GiB TiB       powers of 1024
//   KB  MB  GB  TB        powers of 1000 (as drive makers and "1.5GB" mean)
//   K   M   G   T         powers of 1024 (the shorthand of most CLI tools)
// A fractional number is allowed with any unit and rounded to the nearest byte.
// Throws nt::Error naming `what` (e.g. "--vram-budget") and the text for empty,
// negative, malformed, unknown-unit and over-2^64 inputs.
uint64_t parse_size(std::string_view text, std::string_view what);

// "23.50 GiB", "512.00 MiB", "4.00 KiB", "17 B": binary units, for reports.
std::string format_size(uint64_t bytes);

}  // namespace nt

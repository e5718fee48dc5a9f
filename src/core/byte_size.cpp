#include "core/byte_size.h"

#include <fmt/format.h>

#include <array>
#include <cctype>

#include "core/error.h"

namespace nt {
namespace {

struct Unit {
  std::string_view name;
  uint64_t bytes;
};

constexpr uint64_t kKi = 1024, kMi = kKi * 1024, kGi = kMi * 1024, kTi = kGi * 1024;
constexpr std::array<Unit, 14> kUnits = {{{"", 1},
                                          {"b", 1},
                                          {"kib", kKi},
                                          {"mib", kMi},
                                          {"gib", kGi},
                                          {"tib", kTi},
                                          {"kb", 1000ull},
                                          {"mb", 1000ull * 1000},
                                          {"gb", 1000ull * 1000 * 1000},
                                          {"tb", 1000ull * 1000 * 1000 * 1000},
                                          {"k", kKi},
                                          {"m", kMi},
                                          {"g", kGi},
                                          {"t", kTi}}};

std::string lowercase(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

}  // namespace

uint64_t parse_size(std::string_view text, std::string_view what) {
  const std::string_view s = trim(text);
  auto bad = [&](std::string_view why) -> uint64_t {
    fail("{}: cannot read \"{}\" as a size: {} (examples: 24GiB, 512MiB, 1.5GB, 800M, 1048576)", what, text, why);
  };
  if (s.empty()) return bad("it is empty");
  if (s.front() == '-') return bad("sizes cannot be negative");

  // Digits are accumulated exactly in 128 bits: "1.5GB" must be 1500000000, not a float's neighbour.
  unsigned __int128 mantissa = 0, scale = 1;
  size_t i = 0, digits = 0;
  bool in_fraction = false;
  for (; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '.' && !in_fraction) {
      in_fraction = true;
      continue;
    }
    if (!std::isdigit(static_cast<unsigned char>(c))) break;
    if (++digits > 20) return bad("too many digits");  // keeps mantissa * unit inside 128 bits
    mantissa = mantissa * 10 + unsigned(c - '0');
    if (in_fraction) scale *= 10;
  }
  if (digits == 0) return bad("it does not start with a number");

  const std::string unit = lowercase(trim(s.substr(i)));
  const Unit* found = nullptr;
  for (const Unit& u : kUnits) {
    if (u.name == unit) found = &u;
  }
  if (!found) return bad(fmt::format("unknown unit \"{}\" (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB, K, M, G or T)", unit));

  const unsigned __int128 numerator = mantissa * found->bytes;
  const unsigned __int128 bytes = (numerator + scale / 2) / scale;
  if (bytes > UINT64_MAX) return bad("it is larger than 2^64 bytes");
  return uint64_t(bytes);
}

std::string format_size(uint64_t bytes) {
  if (bytes < kKi) return fmt::format("{} B", bytes);
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  double value = double(bytes) / double(kKi);
  int u = 0;
  while (value >= 1024 && u < 3) {
    value /= 1024;
    ++u;
  }
  return fmt::format("{:.2f} {}", value, units[u]);
}

}  // namespace nt

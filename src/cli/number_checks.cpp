#include "cli/number_checks.h"

#include <fmt/format.h>

#include <cstdlib>
#include <string>

namespace nt::cli {
namespace {

// The flag's text as a number, or an error; CLI11 puts the flag's name before it.
std::string check_number(const std::string& text, bool zero_allowed) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size()) return fmt::format("expected a number, got '{}'", text);
  if (zero_allowed ? value < 0 : value <= 0) {
    return fmt::format("must be {}, got {}", zero_allowed ? "0 or more" : "more than 0", text);
  }
  return {};
}

}  // namespace

CLI::Validator positive() {
  return CLI::Validator([](std::string& text) { return check_number(text, false); }, "POSITIVE");
}

CLI::Validator non_negative() {
  return CLI::Validator([](std::string& text) { return check_number(text, true); }, "NONNEGATIVE");
}

}  // namespace nt::cli

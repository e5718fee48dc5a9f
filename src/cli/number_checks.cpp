#include "cli/number_checks.h"

#include <fmt/core.h>
#include <fmt/format.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <thread>

namespace nt::cli {
namespace {

// The text as a number, or nullopt.
std::optional<double> to_number(const std::string& text) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size()) return std::nullopt;
  return value;
}

// The flag's text as a number, or an error; CLI11 puts the flag's name before it.
std::string check_number(const std::string& text, bool zero_allowed) {
  const std::optional<double> number = to_number(text);
  if (!number) return fmt::format("expected a number, got '{}'", text);
  const double value = *number;
  if (zero_allowed ? value < 0 : value <= 0) {
    return fmt::format("must be {}, got {}", zero_allowed ? "0 or more" : "more than 0", text);
  }
  return {};
}

// The range as --help shows it after the type: "FLOAT:0..1", "INT:>=0".
std::string short_range(const SettingLimit& limit) {
  const std::string full = describe_limit(limit);
  if (full == "a finite number") return "";
  const auto numbers = [&](std::string_view text) { return std::string(text.substr(0, text.find(' '))); };
  if (full.starts_with("more than ")) return ">" + numbers(full.substr(10));
  if (full.starts_with("from ")) {
    const size_t to = full.find(" to ");
    return full.substr(5, to - 5) + ".." + full.substr(to + 4);
  }
  return ">=" + numbers(full);
}

}  // namespace

CLI::Validator positive() {
  return CLI::Validator([](std::string& text) { return check_number(text, false); }, "POSITIVE");
}

CLI::Validator non_negative() {
  return CLI::Validator([](std::string& text) { return check_number(text, true); }, "NONNEGATIVE");
}

CLI::Validator within(const SettingLimit& limit) {
  return CLI::Validator(
      [&limit](std::string& text) -> std::string {
        const std::optional<double> number = to_number(text);
        if (!number) return fmt::format("expected {}, got '{}'", limit.integer ? "an integer" : "a number", text);
        return check_limit(limit, *number);
      },
      short_range(limit));
}

CLI::Validator at_most_hardware_threads() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        if (std::string error = check_number(text, true); !error.empty()) return error;
        const unsigned hardware = std::thread::hardware_concurrency();
        if (hardware > 0 && *to_number(text) > double(hardware)) {
          fmt::print(stderr, "warning: -t {}: this machine runs {} threads at once; using {}\n", text, hardware, hardware);
          text = std::to_string(hardware);
        }
        return {};
      },
      "THREADS");
}

}  // namespace nt::cli

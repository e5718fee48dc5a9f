// Checks for numeric flags whose errors say what was wanted. CLI11's own
// PositiveNumber and NonNegativeNumber report "Value 0 not in range 0.000000
// to 1797...", a range up to DBL_MAX whose lower end the value seems to meet.
#pragma once

#include <CLI/CLI.hpp>

namespace nt::cli {

// More than 0: "--parallel: must be more than 0, got 0".
CLI::Validator positive();
// 0 or more: "--threads: must be 0 or more, got -1".
CLI::Validator non_negative();

}  // namespace nt::cli

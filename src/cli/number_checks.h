// Checks for numeric flags whose errors say what was wanted. CLI11's own
// PositiveNumber and NonNegativeNumber report "Value 0 not in range 0.000000
// to 1797...", a range up to DBL_MAX whose lower end the value seems to meet.
#pragma once

#include <CLI/CLI.hpp>

#include "sampling/setting_limits.h"

namespace nt::cli {

// More than 0: "--parallel: must be more than 0, got 0".
CLI::Validator positive();
// 0 or more: "--threads: must be 0 or more, got -1".
CLI::Validator non_negative();
// A setting of the shared table: "--top-p: must be from 0 to 1, got 2".
CLI::Validator within(const SettingLimit& limit);
// A transform for -t: above the machine's hardware threads, those threads,
// with a warning (a thread per core beyond them only contends).
CLI::Validator at_most_hardware_threads();

}  // namespace nt::cli

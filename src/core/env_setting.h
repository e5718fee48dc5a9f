// Integer settings from the environment (the NT_* switches for A/B runs on
// other machines): unset or empty gives the default; anything but an integer
// in [lo, hi] is an error naming the variable and what it takes.
#pragma once

#include <cstdint>

namespace nt {

int64_t env_setting(const char* name, int64_t fallback, int64_t lo, int64_t hi);

}  // namespace nt

#include "core/env_setting.h"

#include <cstdlib>

#include "core/error.h"

namespace nt {

int64_t env_setting(const char* name, int64_t fallback, int64_t lo, int64_t hi) {
  const char* env = std::getenv(name);
  if (!env || !*env) return fallback;
  char* end = nullptr;
  const long long n = std::strtoll(env, &end, 10);
  if (*end != '\0' || n < lo || n > hi) fail("{}={}: expected an integer from {} to {}", name, env, lo, hi);
  return n;
}

}  // namespace nt

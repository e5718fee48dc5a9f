// The message of an expected nt::Error, for tests that check what it names.
#pragma once

#include <string>

#include "core/error.h"

namespace nt::test {

// The message of the nt::Error that `f` throws ("" if it does not throw).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace nt::test

// One exception type for every user-facing failure: bad files, bad flags,
// exhausted memory. Messages name the file, tensor or field at fault.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace nt {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace nt

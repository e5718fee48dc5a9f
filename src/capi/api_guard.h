// The C API's error rules: every entry point runs its body through guard(),
// which turns each C++ exception into an nt_status and the calling thread's
// message (nt_last_error), so none crosses the ABI. refuse() is how a body
// says what is wrong with the caller's arguments.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "ntransformer.h"

namespace nt::capi {

// An error with the status the caller gets.
class ApiError : public std::runtime_error {
 public:
  ApiError(nt_status status, const std::string& message) : std::runtime_error(message), status_(status) {}
  nt_status status() const { return status_; }

 private:
  nt_status status_;
};

template <typename... Args>
[[noreturn]] void refuse(nt_status status, fmt::format_string<Args...> format, Args&&... args) {
  throw ApiError(status, fmt::format(format, std::forward<Args>(args)...));
}

// The calling thread's message, and setting it.
const std::string& last_error();
nt_status set_error(nt_status status, std::string message);

// Maps whatever `body` throws to a status; body returns NT_STATUS_OK or another status it chose.
template <class Body>
nt_status guard(Body&& body) noexcept;

// A non-null pointer argument, or NT_STATUS_INVALID_ARGUMENT naming it.
template <class T>
T* need(T* pointer, const char* function, const char* name) {
  if (!pointer) refuse(NT_STATUS_INVALID_ARGUMENT, "{}: {} is NULL", function, name);
  return pointer;
}

nt_status status_of_current_exception() noexcept;

// The int a C caller stored in an enum field or argument. C lets any int
// through; in C++ loading a value outside the enumerators' range is
// undefined, so the value is read from the object's bytes instead.
template <class Enum>
int32_t enum_value(const Enum& e) {
  static_assert(sizeof(Enum) == sizeof(int32_t));
  int32_t value;
  std::memcpy(&value, &e, sizeof value);
  return value;
}

template <class Body>
nt_status guard(Body&& body) noexcept {
  try {
    return body();
  } catch (...) {
    return status_of_current_exception();
  }
}

// Copies `text` and a NUL into buf when it fits (the sizes of
// nt_chat_apply_template: *n_bytes the length, or minus the size needed).
nt_status copy_text_out(const std::string& text, char* buf, int32_t buf_size, int32_t* n_bytes, const char* function);

}  // namespace nt::capi

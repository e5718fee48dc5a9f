#include "capi/api_guard.h"

#include <cstring>
#include <exception>
#include <new>

#include "core/error.h"

namespace nt::capi {
namespace {

thread_local std::string t_error;

}  // namespace

const std::string& last_error() { return t_error; }

nt_status set_error(nt_status status, std::string message) {
  try {
    t_error = std::move(message);
  } catch (...) {
    t_error.clear();  // no memory for the message: the status still says what happened
  }
  return status;
}

nt_status status_of_current_exception() noexcept {
  try {
    throw;
  } catch (const ApiError& e) {
    return set_error(e.status(), e.what());
  } catch (const nt::Error& e) {
    return set_error(NT_STATUS_ENGINE_ERROR, e.what());
  } catch (const std::bad_alloc&) {
    return set_error(NT_STATUS_NO_MEMORY, "out of memory");
  } catch (const std::exception& e) {
    return set_error(NT_STATUS_INTERNAL_ERROR, std::string("internal error: ") + e.what());
  } catch (...) {
    return set_error(NT_STATUS_INTERNAL_ERROR, "internal error: an unknown exception");
  }
}

nt_status copy_text_out(const std::string& text, char* buf, int32_t buf_size, int32_t* n_bytes, const char* function) {
  need(n_bytes, function, "n_bytes");
  if (buf_size < 0) refuse(NT_STATUS_INVALID_ARGUMENT, "{}: buf_size {} is negative", function, buf_size);
  if (!buf && buf_size > 0) refuse(NT_STATUS_INVALID_ARGUMENT, "{}: buf is NULL but buf_size is {}", function, buf_size);
  if (text.size() >= size_t(INT32_MAX)) refuse(NT_STATUS_UNSUPPORTED, "{}: the text is over 2 GiB", function);
  const int32_t needed = int32_t(text.size()) + 1;
  if (buf_size < needed) {
    *n_bytes = -needed;
    refuse(NT_STATUS_BUFFER_TOO_SMALL, "{}: the text needs {} bytes with its NUL, the buffer has {}", function, needed,
           buf_size);
  }
  std::memcpy(buf, text.data(), text.size());
  buf[text.size()] = '\0';
  *n_bytes = int32_t(text.size());
  return NT_STATUS_OK;
}

}  // namespace nt::capi

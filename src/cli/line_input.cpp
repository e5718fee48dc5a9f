#include "cli/line_input.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/interrupt.h"

namespace nt::cli {

namespace {
constexpr size_t kReadBytes = 64 * 1024;
}

LineInput::LineInput(const std::string& path) : name_(path.empty() ? "standard input" : path) {
  if (path.empty()) return;
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) fail("-i {}: cannot open the input file: {}", path, std::strerror(errno));
  owned_ = true;
}

LineInput::~LineInput() {
  if (owned_) ::close(fd_);
}

bool LineInput::fill(int timeout_ms) {
  if (eof_) return false;
  // A caught Ctrl-C wakes the wait through the interrupt pipe, and ends it.
  pollfd p[2] = {{fd_, POLLIN, 0}, {interrupt_wake_fd(), POLLIN, 0}};
  const nfds_t watched = p[1].fd >= 0 ? 2 : 1;
  int ready;
  do {
    if (interrupt_requested()) return false;
    ready = ::poll(p, watched, timeout_ms);
  } while (ready < 0 && errno == EINTR);
  if (ready < 0) fail("{}: cannot wait for input: {}", name_, std::strerror(errno));
  if (ready == 0 || !(p[0].revents & (POLLIN | POLLHUP | POLLERR))) return false;
  // Drop what was handed out before the buffer grows.
  if (start_ > 0) {
    buffer_.erase(0, start_);
    start_ = 0;
  }
  const size_t size = buffer_.size();
  buffer_.resize(size + kReadBytes);
  ssize_t got;
  do {
    got = ::read(fd_, buffer_.data() + size, kReadBytes);
  } while (got < 0 && errno == EINTR);
  if (got < 0) fail("{}: cannot read: {}", name_, std::strerror(errno));
  buffer_.resize(size + size_t(got));
  if (got == 0) eof_ = true;
  return true;
}

std::optional<std::string> LineInput::next(bool wait) {
  for (;;) {
    const size_t end = buffer_.find('\n', start_);
    if (end != std::string::npos || (eof_ && start_ < buffer_.size())) {
      const size_t stop = end == std::string::npos ? buffer_.size() : end;
      std::string line = buffer_.substr(start_, stop - start_);
      start_ = end == std::string::npos ? buffer_.size() : end + 1;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      ++line_number_;
      return line;
    }
    if (!fill(wait ? -1 : 0)) return std::nullopt;
  }
}

}  // namespace nt::cli

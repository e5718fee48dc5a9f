// Lines of a file or of standard input as they arrive, so that `batch` can
// start on the first requests of a pipe that is still being written (and
// read a large file a piece at a time) instead of waiting for its end.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace nt::cli {

class LineInput {
 public:
  // `path` empty: standard input. Throws nt::Error naming the path when it
  // cannot be opened.
  explicit LineInput(const std::string& path);
  ~LineInput();
  LineInput(const LineInput&) = delete;
  LineInput& operator=(const LineInput&) = delete;

  // The next line, without its newline (or a '\r' before it): when `wait`,
  // blocking until one is whole or the input ends; otherwise only one already
  // read or readable at once. nullopt when there is none, or when a caught
  // Ctrl-C (core/interrupt.h) ends the wait; the last line needs no newline.
  std::optional<std::string> next(bool wait);
  // Every line has been handed out and the input is at its end.
  bool ended() const { return eof_ && start_ == buffer_.size(); }
  // The number of the last line handed out, 1-based.
  int64_t line_number() const { return line_number_; }

 private:
  // Reads what the input has, waiting up to timeout_ms (-1: until it has
  // some or ends); whether anything came or the input ended.
  bool fill(int timeout_ms);

  std::string name_;  // for errors
  int fd_ = 0;
  bool owned_ = false;
  std::string buffer_;
  size_t start_ = 0;  // where the next line begins in buffer_
  bool eof_ = false;
  int64_t line_number_ = 0;
};

}  // namespace nt::cli

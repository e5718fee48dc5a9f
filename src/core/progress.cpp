#include "core/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>

namespace nt {

ProgressLine::ProgressLine(std::string label, double quiet_seconds)
    : label_(std::move(label)), quiet_seconds_(quiet_seconds), terminal_(isatty(STDERR_FILENO) == 1), start_(Clock::now()) {}

ProgressLine::~ProgressLine() {
  if (open_) std::fputc('\n', stderr);
}

void ProgressLine::update(uint64_t done, uint64_t total) {
  done_ = done;
  total_ = total;
  const auto now = Clock::now();
  if (!terminal_ || now - start_ < std::chrono::duration<double>(quiet_seconds_)) return;
  if (drawn_ && now - last_ < std::chrono::milliseconds(500)) return;
  last_ = now;
  print(false);
}

void ProgressLine::finish() {
  if (total_ == 0 && !drawn_) return;  // nothing was reported
  if (drawn_ || Clock::now() - start_ >= std::chrono::duration<double>(quiet_seconds_)) print(true);
}

void ProgressLine::print(bool final) {
  const double secs = std::chrono::duration<double>(Clock::now() - start_).count();
  fmt::print(stderr, "{}{}: {:.2f} / {:.2f} GB ({:.0f}%, {:.2f} GB/s){}", terminal_ ? "\r" : "", label_, double(done_) / 1e9,
             double(total_) / 1e9, total_ ? 100.0 * double(done_) / double(total_) : 100.0,
             secs > 0 ? double(done_) / 1e9 / secs : 0.0, final ? "\n" : "");
  drawn_ = true;
  open_ = terminal_ && !final;
}

}  // namespace nt

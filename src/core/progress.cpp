#include "core/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>

#include "core/byte_size.h"

namespace nt {

ProgressLine::ProgressLine(std::string label, double quiet_seconds, double log_seconds)
    : label_(std::move(label)),
      quiet_seconds_(quiet_seconds),
      log_seconds_(log_seconds),
      terminal_(isatty(STDERR_FILENO) == 1),
      start_(Clock::now()) {}

ProgressLine::~ProgressLine() {
  if (open_) std::fputc('\n', stderr);
}

void ProgressLine::update(uint64_t done, uint64_t total) {
  done_ = done;
  total_ = total;
  redraw();
}

void ProgressLine::update(std::string figures) {
  figures_ = std::move(figures);
  redraw();
}

void ProgressLine::redraw() {
  const auto now = Clock::now();
  if (now - start_ < std::chrono::duration<double>(quiet_seconds_)) return;
  if (terminal_) {
    if (drawn_ && now - last_ < std::chrono::milliseconds(500)) return;
  } else {
    const auto since = now - (drawn_ ? last_ : start_);
    if (log_seconds_ <= 0 || since < std::chrono::duration<double>(log_seconds_)) return;
  }
  last_ = now;
  print(false);
}

void ProgressLine::finish() {
  if (total_ == 0 && figures_.empty() && !drawn_) return;  // nothing was reported
  if (drawn_ || Clock::now() - start_ >= std::chrono::duration<double>(quiet_seconds_)) print(true);
}

void ProgressLine::print(bool final) {
  const double secs = std::chrono::duration<double>(Clock::now() - start_).count();
  const std::string figures =
      !figures_.empty() ? figures_
                        : fmt::format("{} / {} ({:.0f}%, {})", format_size(done_), format_size(total_),
                                      total_ ? 100.0 * double(done_) / double(total_) : 100.0,
                                      secs > 0 && done_ > 0 ? format_size(uint64_t(double(done_) / secs)) + "/s" : "–");
  // A redrawn line is cleared to its end, in case the figures got shorter.
  const bool redrawn = terminal_ && !final;
  fmt::print(stderr, "{}{}: {}{}{}", terminal_ ? "\r" : "", label_, figures, terminal_ ? "\x1b[K" : "",
             redrawn ? "" : "\n");
  drawn_ = true;
  open_ = redrawn;
}

}  // namespace nt

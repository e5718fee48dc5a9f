// A one-line progress report on stderr for long work (writing a model file,
// moving weights onto the GPU, a batch of generations): done and total GB,
// percent and rate, or any figures the work words itself. On a terminal the
// line is redrawn at most twice a second; otherwise (a log) only the final
// line is written, plus a plain line every `log_seconds` when that is set.
// Work that ends within `quiet_seconds` prints nothing at all.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace nt {

class ProgressLine {
 public:
  ProgressLine(std::string label, double quiet_seconds = 0, double log_seconds = 0);
  ~ProgressLine();  // ends a line left open (the work threw), so that what follows starts on its own
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;
  void update(uint64_t done, uint64_t total);  // bytes
  void update(std::string figures);            // shown after the label as they are
  void finish();  // the final line, unless the work was quick enough to stay quiet

 private:
  using Clock = std::chrono::steady_clock;
  void redraw();
  void print(bool final);

  std::string label_;
  double quiet_seconds_, log_seconds_;
  bool terminal_;
  uint64_t done_ = 0, total_ = 0;
  std::string figures_;  // set by update(figures); otherwise the bytes are shown
  Clock::time_point start_, last_;
  bool drawn_ = false, open_ = false;  // open_: a redrawn line without its newline yet
};

}  // namespace nt

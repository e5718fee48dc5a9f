// Watches streamed text for stop strings. A streaming printer feeds it each
// decoded piece and prints only what it releases: text that could still turn
// out to begin a stop string is held back until the next pieces decide.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace nt {

class StopStringMatcher {
 public:
  struct Step {
    std::string released;  // safe to print now
    bool stopped = false;  // a stop string appeared; `released` ends right before it
  };

  explicit StopStringMatcher(std::vector<std::string> stop_strings);

  // Adds a decoded piece. After a stop, further pieces release nothing.
  Step feed(std::string_view piece);

  // Bytes held back because they may begin a stop string.
  size_t withheld() const { return pending_.size(); }

  // At the end of generation without a stop: releases what was held back.
  std::string flush();

  bool stopped() const { return stopped_; }

 private:
  // Length of the longest suffix of pending_ that is a proper prefix of some stop string.
  size_t partial_match_length() const;

  std::vector<std::string> stop_strings_;
  std::string pending_;
  bool stopped_ = false;
};

}  // namespace nt

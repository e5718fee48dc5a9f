#include "sampling/stop_strings.h"

#include <algorithm>

#include "core/error.h"

namespace nt {

StopStringMatcher::StopStringMatcher(std::vector<std::string> stop_strings) : stop_strings_(std::move(stop_strings)) {
  for (size_t i = 0; i < stop_strings_.size(); ++i)
    if (stop_strings_[i].empty()) fail("stop string #{} is empty", i);
}

StopStringMatcher::Step StopStringMatcher::feed(std::string_view piece) {
  if (stopped_) return {{}, true};
  pending_.append(piece);

  // The stop string that is complete first (earliest end, then earliest start)
  // wins, as it would had the text arrived a byte at a time; how the text is
  // split into pieces must not change where it stops.
  size_t stop_at = std::string::npos, stop_end = std::string::npos;
  for (const auto& stop : stop_strings_) {
    const size_t at = pending_.find(stop);
    if (at == std::string::npos) continue;
    const size_t end = at + stop.size();
    if (end < stop_end || (end == stop_end && at < stop_at)) stop_at = at, stop_end = end;
  }
  if (stop_at != std::string::npos) {
    stopped_ = true;
    Step step{pending_.substr(0, stop_at), true};
    pending_.clear();
    return step;
  }

  // A stop string can only begin inside pending_ (everything earlier was
  // released because no stop string could start there), so holding back the
  // longest suffix that starts one is enough.
  const size_t keep = partial_match_length();
  Step step{pending_.substr(0, pending_.size() - keep), false};
  pending_.erase(0, pending_.size() - keep);
  return step;
}

size_t StopStringMatcher::partial_match_length() const {
  size_t longest = 0;
  const std::string_view text = pending_;
  for (const auto& stop : stop_strings_) {
    for (size_t len = std::min(stop.size() - 1, text.size()); len > longest; --len) {
      if (text.substr(text.size() - len) == std::string_view(stop).substr(0, len)) {
        longest = len;
        break;
      }
    }
  }
  return longest;
}

std::string StopStringMatcher::flush() {
  std::string rest;
  if (!stopped_) rest.swap(pending_);
  pending_.clear();
  return rest;
}

}  // namespace nt

// A one-place hand-off between two threads, for a pipeline whose stages run
// on threads of their own: the sender waits until the place is free and
// fills it, the receiver waits until it is filled and frees it. abort()
// wakes every wait with HandOffAborted, so that one stage's error stops the
// others instead of leaving them waiting.
#pragma once

#include <condition_variable>
#include <mutex>
#include <stdexcept>

namespace nt {

struct HandOffAborted : std::runtime_error {
  HandOffAborted() : std::runtime_error("a pipeline stage stopped the pass") {}
};

class HandOffSlot {
 public:
  void wait_free();
  void fill();
  void wait_filled();
  void free();
  void abort();
  void reset();  // free and not aborted: before a pass

 private:
  void wait_until_full(bool full);
  void set_full(bool full);
  std::mutex mutex_;
  std::condition_variable changed_;
  bool full_ = false, aborted_ = false;
};

}  // namespace nt

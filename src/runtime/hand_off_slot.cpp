#include "runtime/hand_off_slot.h"

namespace nt {

void HandOffSlot::wait_until_full(bool full) {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return aborted_ || full_ == full; });
  if (aborted_) throw HandOffAborted();
}

void HandOffSlot::wait_free() { wait_until_full(false); }
void HandOffSlot::wait_filled() { wait_until_full(true); }

void HandOffSlot::set_full(bool full) {
  {
    std::lock_guard lock(mutex_);
    full_ = full;
  }
  changed_.notify_all();
}

void HandOffSlot::fill() { set_full(true); }
void HandOffSlot::free() { set_full(false); }

void HandOffSlot::abort() {
  {
    std::lock_guard lock(mutex_);
    aborted_ = true;
  }
  changed_.notify_all();
}

void HandOffSlot::reset() {
  std::lock_guard lock(mutex_);
  full_ = aborted_ = false;
}

}  // namespace nt

// The hand-off between two pipeline stages' threads: the receiver sees every
// value the sender put in, in order, none overwritten before it was taken;
// abort wakes a waiting thread with HandOffAborted, and reset clears it.
#include "runtime/hand_off_slot.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace nt {
namespace {

TEST(HandOffSlot, PassesEveryValueInOrder) {
  HandOffSlot slot;
  int place = -1;  // guarded by the slot alone
  std::vector<int> received;
  std::thread receiver([&] {
    for (int i = 0; i < 5000; ++i) {
      slot.wait_filled();
      received.push_back(place);
      slot.free();
    }
  });
  for (int i = 0; i < 5000; ++i) {
    slot.wait_free();
    place = i;
    slot.fill();
  }
  receiver.join();
  ASSERT_EQ(received.size(), 5000u);
  for (int i = 0; i < 5000; ++i) ASSERT_EQ(received[size_t(i)], i) << "a value was overwritten before it was taken";
}

TEST(HandOffSlot, AbortWakesAWaitingStage) {
  HandOffSlot slot;
  bool aborted = false;
  std::thread receiver([&] {
    try {
      slot.wait_filled();
    } catch (const HandOffAborted&) {
      aborted = true;
    }
  });
  slot.abort();
  receiver.join();
  EXPECT_TRUE(aborted);
  EXPECT_THROW(slot.wait_free(), HandOffAborted);
  slot.reset();
  slot.wait_free();  // free again, and returns
  slot.fill();
  slot.wait_filled();
}

}  // namespace
}  // namespace nt

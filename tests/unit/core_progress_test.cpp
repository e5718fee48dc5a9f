// ProgressLine as a log sees it (stderr is not a terminal under ctest): no
// redraws, one final line with the figures (plus one per interval when asked),
// nothing for quick work.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "core/progress.h"

namespace nt {
namespace {

TEST(ProgressLine, WritesOneFinalLineToALog) {
  testing::internal::CaptureStderr();
  {
    ProgressLine progress("moving");
    progress.update(uint64_t(1) << 29, uint64_t(1) << 31);
    progress.update(uint64_t(1) << 30, uint64_t(1) << 31);
    progress.finish();
  }
  const std::string out = testing::internal::GetCapturedStderr();
  EXPECT_EQ(out.find('\r'), std::string::npos) << out;
  EXPECT_EQ(out.rfind("moving: 1.00 GiB / 2.00 GiB (50%, ", 0), 0u) << out;
  EXPECT_EQ(out.find('\n'), out.size() - 1) << out;
}

TEST(ProgressLine, LogsWordedFiguresAtItsIntervalAndAtTheEnd) {
  testing::internal::CaptureStderr();
  {
    ProgressLine progress("batch", 0.0, 0.2);
    progress.update("1/3 done");  // before the interval: not logged
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    progress.update("2/3 done");
    progress.update("3/3 done");  // within the interval of the last line
    progress.finish();
  }
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "batch: 2/3 done\nbatch: 3/3 done\n");
}

TEST(ProgressLine, StaysQuietForQuickWorkAndForNoWork) {
  testing::internal::CaptureStderr();
  {
    ProgressLine quick("quick", 60.0);
    quick.update(1, 2);
    quick.finish();
    ProgressLine idle("idle");
    idle.finish();
  }
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}

}  // namespace
}  // namespace nt

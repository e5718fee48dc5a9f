// ProgressLine as a log sees it (stderr is not a terminal under ctest): no
// redraws, one final line with the figures, nothing for quick work.
#include <gtest/gtest.h>

#include <string>

#include "core/progress.h"

namespace nt {
namespace {

TEST(ProgressLine, WritesOneFinalLineToALog) {
  testing::internal::CaptureStderr();
  {
    ProgressLine progress("moving");
    progress.update(250'000'000, 2'000'000'000);
    progress.update(1'000'000'000, 2'000'000'000);
    progress.finish();
  }
  const std::string out = testing::internal::GetCapturedStderr();
  EXPECT_EQ(out.find('\r'), std::string::npos) << out;
  EXPECT_EQ(out.rfind("moving: 1.00 / 2.00 GB (50%, ", 0), 0u) << out;
  EXPECT_EQ(out.find('\n'), out.size() - 1) << out;
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

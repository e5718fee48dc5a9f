#include "sampling/setting_limits.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"

namespace nt {
namespace {

TEST(SettingLimits, RangesReadAsWordsWithoutTheTypesLimits) {
  EXPECT_EQ(describe_limit(limits::kTopP), "from 0 to 1");
  EXPECT_EQ(describe_limit(limits::kTemperature), "0 or more");
  EXPECT_EQ(describe_limit(limits::kRepeatPenalty), "more than 0");
  EXPECT_EQ(describe_limit(limits::kRepeatLastN), "-1 or more");
  EXPECT_EQ(describe_limit(limits::kPresencePenalty), "a finite number");
}

TEST(SettingLimits, ValuesInRangePassAndOthersSayWhy) {
  EXPECT_EQ(check_limit(limits::kTopP, 1.0), "");
  EXPECT_EQ(check_limit(limits::kTopP, 2.0), "must be from 0 to 1, got 2");
  EXPECT_EQ(check_limit(limits::kRepeatPenalty, 0.0), "must be more than 0, got 0");
  EXPECT_EQ(check_limit(limits::kTopK, 2.5), "must be a whole number, got 2.5");
  EXPECT_EQ(check_limit(limits::kTopK, 3e9), "must be at most 2147483647, got 3000000000");
  EXPECT_EQ(check_limit(limits::kMaxTokens, -1.0), "");
  EXPECT_NE(check_limit(limits::kTemperature, std::nan("")), "");
}

TEST(SettingLimits, SeedsAreMinusOneOrUnsigned64) {
  EXPECT_EQ(parse_seed("-1", "--seed"), std::nullopt);
  EXPECT_EQ(parse_seed("18446744073709551615", "--seed"), 18446744073709551615ull);
  EXPECT_THROW(parse_seed("-2", "--seed"), Error);
  EXPECT_THROW(parse_seed("18446744073709551616", "--seed"), Error);
  EXPECT_THROW(parse_seed("4x", "--seed"), Error);
}

}  // namespace
}  // namespace nt

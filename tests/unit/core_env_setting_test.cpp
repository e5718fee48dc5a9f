// env_setting: the NT_* integer switches read from the environment.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "core/env_setting.h"
#include "core/error.h"

namespace nt {
namespace {

constexpr const char* kName = "NT_TEST_ENV_SETTING";

TEST(EnvSetting, UnsetOrEmptyGivesTheDefault) {
  unsetenv(kName);
  EXPECT_EQ(env_setting(kName, 7, 1, 9), 7);
  setenv(kName, "", 1);
  EXPECT_EQ(env_setting(kName, 7, 1, 9), 7);
  unsetenv(kName);
}

TEST(EnvSetting, ReadsAnIntegerInItsRange) {
  setenv(kName, "9", 1);
  EXPECT_EQ(env_setting(kName, 7, 1, 9), 9);
  setenv(kName, "0", 1);
  EXPECT_EQ(env_setting(kName, -1, 0, 1), 0);
  unsetenv(kName);
}

TEST(EnvSetting, OtherValuesNameTheVariableAndTheRange) {
  for (const char* bad : {"10", "0", "2x", "x", "1.5"}) {
    setenv(kName, bad, 1);
    try {
      env_setting(kName, 7, 1, 9);
      ADD_FAILURE() << bad << " was taken";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), std::string(kName) + "=" + bad + ": expected an integer from 1 to 9");
    }
  }
  unsetenv(kName);
}

}  // namespace
}  // namespace nt

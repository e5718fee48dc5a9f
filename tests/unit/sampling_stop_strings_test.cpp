// StopStringMatcher: what a streaming printer shows must be exactly the text
// before the first stop string, however the text is split into pieces.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "sampling/stop_strings.h"

namespace nt {
namespace {

TEST(StopStrings, StopSplitAcrossPiecesIsNeverPrinted) {
  StopStringMatcher m({"</s>", "STOP"});
  auto s = m.feed("Hello <");
  EXPECT_EQ(s.released, "Hello ");
  EXPECT_FALSE(s.stopped);
  EXPECT_EQ(m.withheld(), 1u);
  s = m.feed("/");
  EXPECT_EQ(s.released, "");
  EXPECT_EQ(m.withheld(), 2u);
  s = m.feed("s> world");
  EXPECT_EQ(s.released, "");
  EXPECT_TRUE(s.stopped);
  EXPECT_TRUE(m.feed("more").stopped);
  EXPECT_EQ(m.flush(), "");
}

TEST(StopStrings, FalseAlarmReleasesTheHeldText) {
  StopStringMatcher m({"</s>"});
  EXPECT_EQ(m.feed("a </").released, "a ");
  auto s = m.feed("b>");
  EXPECT_EQ(s.released, "</b>");
  EXPECT_FALSE(s.stopped);
  EXPECT_EQ(m.withheld(), 0u);
}

TEST(StopStrings, RestartsMatchingInsideAFailedPrefix) {
  StopStringMatcher m({"abc"});
  EXPECT_EQ(m.feed("aab").released, "a");  // "ab" may still become "abc"
  auto s = m.feed("cd");
  EXPECT_TRUE(s.stopped);
  EXPECT_EQ(s.released, "");
}

TEST(StopStrings, TextAfterTheStopInTheSamePieceIsDropped) {
  StopStringMatcher m({"\n\n", "User:"});
  auto s = m.feed("answer.User: hi\n\n");
  EXPECT_TRUE(s.stopped);
  EXPECT_EQ(s.released, "answer.");
}

TEST(StopStrings, TheStopCompletedFirstWinsEvenIfAnotherStartedEarlier) {
  StopStringMatcher m({"abcd", "bc"});
  auto s = m.feed("abcd");
  EXPECT_TRUE(s.stopped);
  EXPECT_EQ(s.released, "a");
}

TEST(StopStrings, FlushReleasesAPendingPrefixAtTheEnd) {
  StopStringMatcher m({"<|im_end|>"});
  EXPECT_EQ(m.feed("done<|im").released, "done");
  EXPECT_EQ(m.flush(), "<|im");
}

TEST(StopStrings, EmptyStopStringIsRejected) { EXPECT_THROW(StopStringMatcher({"ok", ""}), Error); }

// Random texts over a tiny alphabet (so prefixes collide often), random stop
// strings, random splits: the printed text must equal the text before the
// first stop string to complete, found here with a plain search of the whole text.
TEST(StopStrings, RandomSplitsPrintExactlyTheTextBeforeTheFirstStop) {
  const uint64_t seed = (uint64_t(std::random_device{}()) << 32) | std::random_device{}();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const auto random_string = [&](size_t min_len, size_t max_len) {
    std::string s(std::uniform_int_distribution<size_t>(min_len, max_len)(rng), ' ');
    for (auto& ch : s) ch = "abc"[rng() % 3];
    return s;
  };
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<std::string> stops;
    for (size_t i = 0, n = 1 + rng() % 3; i < n; ++i) stops.push_back(random_string(1, 5));
    const std::string text = random_string(0, 40);

    // The stop that a byte-at-a-time reader completes first: earliest end, then earliest start.
    size_t first_stop = std::string::npos, first_end = std::string::npos;
    for (const auto& stop : stops) {
      const size_t at = text.find(stop);
      if (at == std::string::npos) continue;
      if (at + stop.size() < first_end || (at + stop.size() == first_end && at < first_stop))
        first_stop = at, first_end = at + stop.size();
    }
    const std::string expected = text.substr(0, first_stop);

    StopStringMatcher m(stops);
    std::string printed;
    bool stopped = false;
    for (size_t pos = 0; pos < text.size() && !stopped;) {
      const size_t len = 1 + rng() % 4;
      const auto step = m.feed(std::string_view(text).substr(pos, len));
      printed += step.released;
      stopped = step.stopped;
      pos += len;
    }
    printed += m.flush();
    ASSERT_EQ(printed, expected) << "trial " << trial << " text '" << text << "'";
    ASSERT_EQ(stopped, first_stop != std::string::npos) << "trial " << trial << " text '" << text << "'";
  }
}

}  // namespace
}  // namespace nt

// token_logprobs against a log-softmax computed here in long double, on rows
// whose plain float exp would overflow, and its order and range checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/error.h"
#include "sampling/token_logprobs.h"

namespace nt {
namespace {

std::vector<long double> reference_log_softmax(const std::vector<float>& row) {
  long double sum = 0;
  for (const float x : row) sum += std::exp((long double)x);
  std::vector<long double> out;
  for (const float x : row) out.push_back((long double)x - std::log(sum));
  return out;
}

TEST(TokenLogprobs, AreTheLogSoftmaxOfTheWholeRowEvenWhereExpOverflowsAFloat) {
  std::mt19937 rng(7);
  std::normal_distribution<float> noise(0.0f, 4.0f);
  std::vector<float> row(50000);
  for (float& x : row) x = 200.0f + noise(rng);  // exp(200) is past float's range
  const std::vector<long double> expected = reference_log_softmax(row);
  const TokenLogprobs got = token_logprobs(row, 123, 20);
  EXPECT_EQ(got.chosen.id, 123);
  EXPECT_NEAR(got.chosen.logprob, double(expected[123]), 1e-4);
  ASSERT_EQ(got.top.size(), 20u);
  std::vector<long double> sorted = expected;
  std::sort(sorted.rbegin(), sorted.rend());
  for (size_t k = 0; k < got.top.size(); ++k) {
    EXPECT_NEAR(got.top[k].logprob, double(expected[size_t(got.top[k].id)]), 1e-4);
    EXPECT_NEAR(got.top[k].logprob, double(sorted[k]), 1e-4);
  }
}

TEST(TokenLogprobs, EqualLogitsRankByIdAndZeroTopGivesTheChosenOnly) {
  const std::vector<float> row = {1.0f, 3.0f, 3.0f, -2.0f, 3.0f};
  const TokenLogprobs got = token_logprobs(row, 3, 3);
  ASSERT_EQ(got.top.size(), 3u);
  EXPECT_EQ(got.top[0].id, 1);
  EXPECT_EQ(got.top[1].id, 2);
  EXPECT_EQ(got.top[2].id, 4);
  EXPECT_FLOAT_EQ(got.top[0].logprob, got.top[2].logprob);
  double mass = 0;
  for (size_t i = 0; i < row.size(); ++i) mass += std::exp(double(token_logprobs(row, int32_t(i), 0).chosen.logprob));
  EXPECT_NEAR(mass, 1.0, 1e-6);
  EXPECT_TRUE(token_logprobs(row, 0, 0).top.empty());
}

TEST(TokenLogprobs, RefusesATokenOrATopOutsideTheRow) {
  const std::vector<float> row = {0.0f, 1.0f};
  EXPECT_THROW(token_logprobs(row, 2, 0), Error);
  EXPECT_THROW(token_logprobs(row, -1, 0), Error);
  EXPECT_THROW(token_logprobs(row, 0, 2), Error);
  EXPECT_THROW(token_logprobs(row, 0, -1), Error);
}

}  // namespace
}  // namespace nt

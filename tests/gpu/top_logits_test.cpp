// top_logits against Candidates::assign (the sampler's own top-k) on rows
// with ties across and inside the 4096-logit chunks, -0 beside +0, masked
// tokens, rows shorter than a chunk, and poisoned logits.
#include <gtest/gtest.h>

#include <cmath>
#include <span>

#include "backend/cuda/kernels/top_logits.h"
#include "gpu_test_util.h"
#include "sampling/candidates.h"

namespace nt {
namespace {

struct DeviceTop {
  std::vector<Candidate> top;
  int32_t poisoned;
};

DeviceTop device_top(const std::vector<float>& row, int64_t k) {
  const DeviceBuffer x = test::to_device(row);
  DeviceBuffer out = test::poisoned(sizeof(TopLogit) * size_t(k)), poisoned = test::poisoned(4);
  DeviceBuffer scratch(top_logits_scratch_bytes(int64_t(row.size())), "top scratch");
  if (!top_logits_fits(int64_t(row.size()), k)) fail("the top {} of {} logits do not fit", k, row.size());
  const DeviceBuffer k_dev = test::to_device(std::vector<int32_t>{int32_t(k)});
  top_logits(x.as<float>(), int64_t(row.size()), k_dev.as<int32_t>(), out.as<TopLogit>(), poisoned.as<int32_t>(), scratch.get(),
             nullptr);
  const auto got = test::to_host<TopLogit>(out, size_t(k));
  DeviceTop r{{}, test::to_host<int32_t>(poisoned, 1)[0]};
  for (const TopLogit& t : got) r.top.push_back({t.logit, t.id});
  return r;
}

void expect_sampler_top(const std::vector<float>& row, int64_t k) {
  SCOPED_TRACE(testing::Message() << "n " << row.size() << ", k " << k);
  Candidates want;
  want.assign(row, k);
  const DeviceTop got = device_top(row, k);
  EXPECT_EQ(got.poisoned, -1);
  ASSERT_EQ(got.top.size(), want.view().size());
  for (size_t i = 0; i < got.top.size(); ++i) {
    EXPECT_EQ(got.top[i].id, want.view()[i].id) << "rank " << i;
    EXPECT_EQ(got.top[i].logit, want.view()[i].logit) << "rank " << i;  // -0 == +0
  }
}

TEST(TopLogits, KeepsWhatTheSamplerKeeps) {
  for (const int64_t n : {int64_t(128256), int64_t(32000), int64_t(8193), int64_t(4096), int64_t(300)}) {
    auto row = test::random_floats(size_t(n), -12.0f, 12.0f);
    for (float& x : row) x = std::round(x * 8.0f) / 8.0f;  // ~190 equal values each: ties at every cut
    for (const int64_t k : {int64_t(1), int64_t(40), int64_t(104), kMaxTopLogits}) expect_sampler_top(row, k);
  }
}

TEST(TopLogits, OrdersEqualValuesByIndex) {
  std::vector<float> zeros(5000, 0.0f);
  for (size_t i = 0; i < zeros.size(); i += 3) zeros[i] = -0.0f;
  expect_sampler_top(zeros, 100);
  std::vector<float> masked(6000, -INFINITY);  // fewer finite logits than k: the rest are -inf by index
  for (const size_t i : {17u, 2500u, 4096u, 5999u}) masked[i] = float(i) * 1e-3f;
  expect_sampler_top(masked, 50);
  std::vector<float> one_winner(129, 1.0f);
  one_winner[128] = 2.0f;  // the last logit of a row of one chunk
  expect_sampler_top(one_winner, 3);
}

TEST(TopLogits, ReportsTheFirstPoisonedLogit) {
  auto row = test::random_floats(50000);
  EXPECT_EQ(device_top(row, 10).poisoned, -1);
  row[40000] = INFINITY;
  row[7000] = NAN;
  row[45000] = NAN;
  EXPECT_EQ(device_top(row, 10).poisoned, 7000);
}

TEST(TopLogits, FitsALlama3RowUpToTheLargestK) {
  EXPECT_TRUE(top_logits_fits(128256, kMaxTopLogits));
  EXPECT_FALSE(top_logits_fits(50000, 0));
  EXPECT_FALSE(top_logits_fits(50000, kMaxTopLogits + 1));
  EXPECT_FALSE(top_logits_fits(int64_t(1) << 20, kMaxTopLogits)) << "256 chunks' 256 candidates exceed the final block";
  EXPECT_TRUE(top_logits_fits(int64_t(1) << 18, 128));
}

}  // namespace
}  // namespace nt

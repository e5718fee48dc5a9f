// The tensor split's sums across ranks, apart from the runner: ranks on one
// GPU (the test mode) on threads of their own, each summing its buffer with
// the others' several times in a row, must all end with the exact sum of
// small integers (so any order of addition gives it); a rank that fails
// wakes the others instead of leaving them waiting; and rearm() readies the
// ranks for the next pass.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "backend/cuda/multi_gpu/residual_reducer.h"
#include "gpu_test_util.h"

namespace nt {
namespace {

constexpr int64_t kCount = 1000;

std::vector<float> rank_values(int rank, int round) {
  std::vector<float> v(kCount);
  for (int64_t i = 0; i < kCount; ++i) v[size_t(i)] = float((i * (rank + 1) + round) % 97);
  return v;
}

TEST(ResidualReducer, RanksOnOneGpuAllEndWithTheSum) {
  constexpr int kRanks = 3, kRounds = 5;
  auto reducers = shared_gpu_reducers(kRanks);
  std::vector<DeviceBuffer> buffers;
  for (int r = 0; r < kRanks; ++r) buffers.push_back(test::poisoned(kCount * 4));
  std::vector<std::vector<std::vector<float>>> got(kRounds, std::vector<std::vector<float>>(kRanks));
  const auto rank = [&](int r) {
    cudaStream_t stream;
    NT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    for (int round = 0; round < kRounds; ++round) {
      const std::vector<float> mine = rank_values(r, round);
      NT_CUDA_CHECK(cudaMemcpyAsync(buffers[size_t(r)].get(), mine.data(), kCount * 4, cudaMemcpyHostToDevice, stream));
      reducers[size_t(r)]->sum(buffers[size_t(r)].as<float>(), kCount, stream);
      got[size_t(round)][size_t(r)].resize(kCount);
      NT_CUDA_CHECK(cudaMemcpyAsync(got[size_t(round)][size_t(r)].data(), buffers[size_t(r)].get(), kCount * 4,
                                    cudaMemcpyDeviceToHost, stream));
      NT_CUDA_CHECK(cudaStreamSynchronize(stream));
    }
    NT_CUDA_CHECK(cudaStreamDestroy(stream));
  };
  std::vector<std::thread> threads;
  for (int r = 1; r < kRanks; ++r) threads.emplace_back(rank, r);
  rank(0);
  for (std::thread& t : threads) t.join();
  for (int round = 0; round < kRounds; ++round) {
    std::vector<float> want(kCount, 0.0f);
    for (int r = 0; r < kRanks; ++r) {
      const std::vector<float> v = rank_values(r, round);
      for (int64_t i = 0; i < kCount; ++i) want[size_t(i)] += v[size_t(i)];
    }
    for (int r = 0; r < kRanks; ++r) EXPECT_EQ(got[size_t(round)][size_t(r)], want) << "round " << round << ", rank " << r;
  }
}

TEST(ResidualReducer, AFailedRankWakesTheOthersUntilRearmed) {
  auto reducers = shared_gpu_reducers(2);
  DeviceBuffer buffer = test::poisoned(kCount * 4);
  std::atomic<bool> woke{false};
  std::thread waiting([&] {
    try {
      reducers[1]->sum(buffer.as<float>(), kCount, nullptr);  // rank 0 never comes
    } catch (const ReductionAborted&) {
      woke = true;
    }
  });
  reducers[0]->abort();
  waiting.join();
  EXPECT_TRUE(woke) << "rank 1 waited on for a rank that failed";
  EXPECT_THROW(reducers[0]->sum(buffer.as<float>(), kCount, nullptr), ReductionAborted) << "aborted until rearmed";
  for (const auto& r : reducers) r->rearm();
  const std::vector<float> a = rank_values(0, 1), b = rank_values(1, 1);
  DeviceBuffer first = test::to_device(a), second = test::to_device(b);
  std::thread other([&] { reducers[1]->sum(second.as<float>(), kCount, nullptr); });
  reducers[0]->sum(first.as<float>(), kCount, nullptr);
  other.join();
  std::vector<float> want(a);
  for (int64_t i = 0; i < kCount; ++i) want[size_t(i)] += b[size_t(i)];
  EXPECT_EQ(test::to_host<float>(first, kCount), want) << "after rearm()";
  EXPECT_EQ(test::to_host<float>(second, kCount), want) << "after rearm()";
  // One rank alone sums nothing and waits for nobody.
  auto alone = shared_gpu_reducers(1);
  const std::vector<float> values = rank_values(0, 0);
  DeviceBuffer one = test::to_device(values);
  alone[0]->sum(one.as<float>(), kCount, nullptr);
  EXPECT_EQ(test::to_host<float>(one, kCount), values);
}

}  // namespace
}  // namespace nt

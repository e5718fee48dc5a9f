#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <vector>

#include "backend/cpu/thread_pool.h"

namespace nt::cpu {
namespace {

TEST(CpuThreadPool, DefaultsToPhysicalCores) {
  ThreadPool pool;
  EXPECT_EQ(pool.size(), physical_core_count());
  EXPECT_GE(pool.size(), 1);
}

TEST(CpuThreadPool, RunCallsEveryThreadOnce) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    std::vector<std::atomic<int>> calls(threads);
    pool.run([&](int i, int n) {
      EXPECT_EQ(n, threads);
      calls[i].fetch_add(1);
    });
    for (auto& c : calls) EXPECT_EQ(c.load(), 1);
  }
}

TEST(CpuThreadPool, ParallelForCoversEachIndexExactlyOnce) {
  ThreadPool pool(3);
  for (int64_t n : {0, 1, 2, 3, 7, 64, 1000, 4099}) {
    for (int64_t grain : {1, 4, 16}) {
      std::vector<std::atomic<int>> hits(n);
      pool.parallel_for(
          n,
          [&](int64_t b, int64_t e) {
            EXPECT_LT(b, e);
            EXPECT_EQ(b % grain, 0) << "ranges start on grain boundaries";
            for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
          },
          grain);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n " << n << " grain " << grain << " i " << i;
    }
  }
}

// Decode issues hundreds of tiny ops back to back; every one must see all
// writes of the previous one.
TEST(CpuThreadPool, ManyBackToBackDispatchesStayConsistent) {
  ThreadPool pool(2);
  std::vector<int64_t> data(64, 0);
  for (int round = 0; round < 20000; ++round) {
    pool.parallel_for(int64_t(data.size()), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) data[i] += i + round;
    });
  }
  for (int64_t i = 0; i < int64_t(data.size()); ++i) EXPECT_EQ(data[i], 20000 * i + 20000LL * 19999 / 2);
}

TEST(CpuThreadPool, NestedCallsRunInline) {
  ThreadPool pool(2);
  std::atomic<int> inner{0};
  pool.run([&](int, int) {
    pool.run([&](int i, int n) {
      EXPECT_EQ(i, 0);
      EXPECT_EQ(n, 1);
      inner.fetch_add(1);
    });
  });
  EXPECT_EQ(inner.load(), 2);
}

TEST(CpuThreadPool, ExceptionsReachTheCaller) {
  ThreadPool pool(2);
  EXPECT_THROW(pool.run([](int i, int) {
                 if (i == 1) throw std::runtime_error("worker failed");
               }),
               std::runtime_error);
  std::atomic<int> calls{0};
  pool.run([&](int, int) { calls.fetch_add(1); });  // still usable
  EXPECT_EQ(calls.load(), 2);
}

}  // namespace
}  // namespace nt::cpu

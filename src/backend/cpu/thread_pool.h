// Persistent worker threads for the CPU kernels. Decode issues a few hundred
// small parallel ops per token, so dispatch must cost well under a
// microsecond: idle workers spin on a generation counter for a while before
// they sleep, and the calling thread always takes a share of the work.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

#include "core/align.h"

namespace nt::cpu {

// Physical cores this process may run on (SMT siblings counted once);
// falls back to std::thread::hardware_concurrency().
int physical_core_count();

class ThreadPool {
 public:
  // n_threads counts the caller; 0 means physical_core_count().
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(thread_index, n_threads) once on every thread and returns when
  // all are done. A call from inside a task runs fn(0, 1) inline.
  template <typename Fn>
  void run(Fn&& fn) {
    using F = std::remove_reference_t<Fn>;
    run_erased(&fn, [](void* ctx, int i, int n) { (*static_cast<F*>(ctx))(i, n); });
  }

  // Splits [0, n) into about pieces_per_thread_ contiguous pieces per
  // thread, cut at multiples of `grain`, which the threads take in turn until
  // none is left, calling fn(begin, end) for each: a thread slowed by others
  // on its core (a VM's shared vCPU, a busy sibling) then does less instead
  // of holding up the rest.
  template <typename Fn>
  void parallel_for(int64_t n, Fn&& fn, int64_t grain = 1) {
    if (n <= 0) return;
    const int64_t chunks = ceil_div(n, grain);
    const int64_t pieces = std::min<int64_t>(chunks, int64_t(n_threads_) * pieces_per_thread_);
    std::atomic<int64_t> next{0};
    run([&](int, int) {
      for (int64_t p = next.fetch_add(1, std::memory_order_relaxed); p < pieces; p = next.fetch_add(1, std::memory_order_relaxed)) {
        const int64_t begin = std::min(n, chunks * p / pieces * grain);
        const int64_t end = std::min(n, chunks * (p + 1) / pieces * grain);
        if (begin < end) fn(begin, end);
      }
    });
  }

 private:
  using TaskFn = void (*)(void*, int, int);
  void run_erased(void* ctx, TaskFn fn);
  void worker_loop(int index);
  void run_task(int index);

  int n_threads_;
  int pieces_per_thread_;  // Tuning::cpu_pieces_per_thread (1: one static share each, for A/B runs)
  std::vector<std::thread> workers_;
  std::mutex dispatch_mutex_;  // one parallel op at a time from outside
  void* task_ctx_ = nullptr;
  TaskFn task_fn_ = nullptr;
  std::atomic<uint32_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  std::mutex error_mutex_;
  std::exception_ptr error_;
};

}  // namespace nt::cpu

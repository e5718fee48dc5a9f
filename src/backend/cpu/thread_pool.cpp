#include "backend/cpu/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <set>
#include <string>
#include <utility>

#include "core/error.h"
#include "core/tuning.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define NT_CPU_RELAX() _mm_pause()
#else
#define NT_CPU_RELAX() ((void)0)
#endif

namespace nt::cpu {

namespace {

// How long a waiting thread spins before it sleeps: long enough to bridge the
// serial gaps between the ops of one decode step. Spinners also yield now and
// then, so an oversubscribed machine still runs the thread being waited for.
constexpr auto kSpinTime = std::chrono::microseconds(500);
constexpr int kSpinsPerCheck = 256;

// Spins until value != seen, then sleeps on the atomic once kSpinTime passed.
template <typename T>
T wait_while_equal(const std::atomic<T>& value, T seen) {
  const auto spin_until = std::chrono::steady_clock::now() + kSpinTime;
  T now = value.load(std::memory_order_acquire);
  for (int i = 1; now == seen; ++i) {
    NT_CPU_RELAX();
    if (i % kSpinsPerCheck == 0) {
      if (std::chrono::steady_clock::now() > spin_until) {
        value.wait(seen, std::memory_order_acquire);
      } else {
        sched_yield();
      }
    }
    now = value.load(std::memory_order_acquire);
  }
  return now;
}

thread_local bool tls_inside_task = false;

int read_int(const std::string& path) {
  std::ifstream in(path);
  int value = -1;
  if (!(in >> value)) return -1;
  return value;
}

// Pieces a parallel_for hands each thread: enough that threads that finish
// early take over from slow ones, few enough that each stays a long sequential read.
int pieces_per_thread_setting() { return tuning().cpu_pieces_per_thread; }

}  // namespace

int physical_core_count() {
  const int fallback = std::max(1u, std::thread::hardware_concurrency());
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return fallback;
  std::set<std::pair<int, int>> cores;  // (package, core) of every allowed CPU
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &allowed)) continue;
    const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
    const int package = read_int(dir + "physical_package_id");
    const int core = read_int(dir + "core_id");
    if (package < 0 || core < 0) return std::min(fallback, CPU_COUNT(&allowed));
    cores.emplace(package, core);
  }
  return cores.empty() ? fallback : int(cores.size());
}

ThreadPool::ThreadPool(int n_threads)
    : n_threads_(n_threads > 0 ? n_threads : physical_core_count()), pieces_per_thread_(pieces_per_thread_setting()) {
  workers_.reserve(n_threads_ - 1);
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_task(int index) {
  try {
    task_fn_(task_ctx_, index, n_threads_);
  } catch (...) {
    std::lock_guard lock(error_mutex_);
    if (!error_) error_ = std::current_exception();
  }
}

void ThreadPool::worker_loop(int index) {
  tls_inside_task = true;
  uint32_t seen = 0;
  while (true) {
    seen = wait_while_equal(generation_, seen);
    if (stop_.load()) return;
    run_task(index);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
  }
}

void ThreadPool::run_erased(void* ctx, TaskFn fn) {
  if (n_threads_ == 1 || tls_inside_task) {
    fn(ctx, 0, 1);
    return;
  }
  std::lock_guard dispatch(dispatch_mutex_);
  task_ctx_ = ctx;
  task_fn_ = fn;
  error_ = nullptr;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();

  tls_inside_task = true;
  run_task(0);
  tls_inside_task = false;
  for (int left = pending_.load(std::memory_order_acquire); left != 0;) left = wait_while_equal(pending_, left);

  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

}  // namespace nt::cpu

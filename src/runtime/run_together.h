// Work for several ranks (a pipeline's stages, a tensor split's ranks) at
// once: rank 0 on the calling thread, the others on threads of their own.
// When one fails, `abort` wakes the ranks that wait on it, whose `Aborted`
// errors are then dropped; the first real error, in rank order, is rethrown
// once every rank has returned.
#pragma once

#include <cstddef>
#include <exception>
#include <thread>
#include <vector>

namespace nt {

template <typename Aborted, typename Work, typename Abort>
void run_together(size_t ranks, Work&& work, Abort&& abort) {
  std::vector<std::exception_ptr> errors(ranks);
  const auto guarded = [&](size_t rank) {
    try {
      work(rank);
    } catch (const Aborted&) {
      // another rank failed; its error is the one to report
    } catch (...) {
      errors[rank] = std::current_exception();
      abort();
    }
  };
  std::vector<std::thread> workers;
  try {
    for (size_t rank = 1; rank < ranks; ++rank) workers.emplace_back(guarded, rank);
  } catch (...) {  // no thread for a rank: the others must not wait for it
    abort();
    for (std::thread& w : workers) w.join();
    throw;
  }
  guarded(0);
  for (std::thread& w : workers) w.join();
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace nt

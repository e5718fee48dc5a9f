#include "core/interrupt.h"

#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <mutex>

namespace nt {
namespace {

constexpr int kFatalSignals[] = {SIGINT, SIGTERM, SIGHUP};

std::atomic<int> g_interrupt_signal{0};
// A pipe the handler writes a byte to when it raises the flag, so that a wait
// in poll() wakes even when the signal came just before it began.
int g_wake_pipe[2] = {-1, -1};
// Which signals only raise the flag; changed by InterruptScope, read by the handler.
std::atomic<int> g_catch_sigint{0}, g_catch_sigterm{0};

// The handler may only touch what is async-signal-safe: fixed buffers, unlink.
struct PendingPath {
  std::atomic<bool> used{false};
  char path[PATH_MAX];
};
PendingPath g_paths[8];
std::mutex g_paths_mutex;  // between threads registering paths, not the handler

// Raises the flag and wakes the pipe once; whether this call raised it.
bool raise_flag(int sig) {
  int expected = 0;
  if (!g_interrupt_signal.compare_exchange_strong(expected, sig)) return false;
  if (g_wake_pipe[1] >= 0) {
    const char byte = 1;
    [[maybe_unused]] const ssize_t written = ::write(g_wake_pipe[1], &byte, 1);
  }
  return true;
}

void on_signal(int sig) {
  const bool catching = (sig == SIGINT && g_catch_sigint.load() > 0) || (sig == SIGTERM && g_catch_sigterm.load() > 0);
  if (catching && raise_flag(sig)) return;
  for (PendingPath& p : g_paths) {
    if (p.used.load()) ::unlink(p.path);
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

}  // namespace

void install_signal_handlers() {
  if (g_wake_pipe[0] < 0 && ::pipe2(g_wake_pipe, O_CLOEXEC | O_NONBLOCK) != 0) g_wake_pipe[0] = g_wake_pipe[1] = -1;
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (const int sig : kFatalSignals) {
    struct sigaction previous {};
    // A signal the caller ignored (nohup, a background job) stays ignored.
    if (sigaction(sig, nullptr, &previous) == 0 && previous.sa_handler == SIG_IGN) continue;
    sigaction(sig, &action, nullptr);
  }
}

bool interrupt_requested() { return g_interrupt_signal.load() != 0; }
void clear_interrupt() {
  g_interrupt_signal.store(0);
  char drain[64];
  while (g_wake_pipe[0] >= 0 && ::read(g_wake_pipe[0], drain, sizeof(drain)) > 0) {
  }
}

int interrupt_wake_fd() { return g_wake_pipe[0]; }

void request_interrupt() { raise_flag(SIGINT); }
int interrupt_signal() { return g_interrupt_signal.load(); }

InterruptScope::InterruptScope(bool catch_sigterm) {
  clear_interrupt();
  ++g_catch_sigint;
  if (catch_sigterm) ++g_catch_sigterm;
  catches_sigterm_ = catch_sigterm;
}

InterruptScope::~InterruptScope() {
  --g_catch_sigint;
  if (catches_sigterm_) --g_catch_sigterm;
}

void remove_on_signal(const std::string& path) {
  if (path.size() >= PATH_MAX) return;
  const std::lock_guard lock(g_paths_mutex);
  for (PendingPath& p : g_paths) {
    if (p.used.load()) continue;
    std::memcpy(p.path, path.c_str(), path.size() + 1);
    p.used.store(true);
    return;
  }
}

void keep_on_signal(const std::string& path) {
  const std::lock_guard lock(g_paths_mutex);
  for (PendingPath& p : g_paths) {
    if (p.used.load() && path == p.path) {
      p.used.store(false);
      return;
    }
  }
}

}  // namespace nt

// Ctrl-C and termination, one handler for the whole process.
//
// By default SIGINT, SIGTERM and SIGHUP end the program as usual, after
// removing the temporary files of outputs not yet complete (OutputFile), so an
// interrupted `quantize` leaves neither a partial model nor a stray temporary.
// A command that can stop cleanly (run, chat, batch, perplexity, bench) holds
// an InterruptScope while it works: the first SIGINT (and SIGTERM, if asked)
// then only raises a flag that its loop reads at the next token, and a second
// one, while the flag is still up, ends the program as above.
#pragma once

#include <string>

namespace nt {

// Installs the handler; main calls it once, before any command runs.
void install_signal_handlers();

// Whether a caught signal asked the current work to stop.
bool interrupt_requested();
// Lowers the flag (chat: the reply stopped, the conversation goes on).
void clear_interrupt();
// The signal that raised the flag (SIGINT or SIGTERM), 0 when none.
int interrupt_signal();
// Readable once the flag is raised (until clear_interrupt): poll it beside
// an input to wake on Ctrl-C however the signal and the wait interleave. -1
// before install_signal_handlers.
int interrupt_wake_fd();
// Raises the flag as a caught Ctrl-C would (a command ending its own wait on it).
void request_interrupt();

class InterruptScope {
 public:
  explicit InterruptScope(bool catch_sigterm = false);
  ~InterruptScope();
  InterruptScope(const InterruptScope&) = delete;
  InterruptScope& operator=(const InterruptScope&) = delete;

 private:
  bool catches_sigterm_;
};

// Paths removed if a signal ends the program (at most 8 at a time; longer
// paths than PATH_MAX are not registered).
void remove_on_signal(const std::string& path);
void keep_on_signal(const std::string& path);

}  // namespace nt

#include "train/stop_signals.h"

#include <atomic>
#include <csignal>

namespace tessera::train {
namespace {

// An atomic, not a volatile sig_atomic_t: the kernel may run the handler on any thread that does
// not block the signal (an OpenMP worker, the collective watchdog, Open MPI's), not only on the
// main thread that reads the flag.
std::atomic<int> g_stop_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "a signal handler may only touch lock-free atomics");

extern "C" void on_stop_signal(int sig) {
  if (g_stop_signal != 0) {  // a second one (an impatient Ctrl-C): the default action, at once
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    return;
  }
  g_stop_signal = sig;
}

}  // namespace

int own_stop_signal() { return g_stop_signal; }

int agreed_signal(int own, std::int32_t signalled, std::int32_t interrupted) {
  if (own != 0) return own;
  if (signalled == 0) return 0;
  return interrupted == signalled ? SIGINT : SIGTERM;
}

int agreed_stop_signal(dist::Communicator* world) {
  const int own = g_stop_signal;
  const int sig = agreed_signal(own, dist::count_ranks(own != 0, world), dist::count_ranks(own == SIGINT, world));
  return sig != 0 ? sig : SIGTERM;
}

const char* signal_name(int sig) { return sig == SIGINT ? "SIGINT" : "SIGTERM"; }

StopSignals::StopSignals() {
  g_stop_signal = 0;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, &old_term_);
  sigaction(SIGINT, &sa, &old_int_);
}

StopSignals::~StopSignals() {
  sigaction(SIGTERM, &old_term_, nullptr);
  sigaction(SIGINT, &old_int_, nullptr);
}

}  // namespace tessera::train

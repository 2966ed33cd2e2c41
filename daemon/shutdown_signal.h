// Blocks SIGTERM and SIGINT in every thread (call before starting any) and waits for one,
// so the daemons shut down from their main thread in an orderly way.
#ifndef REFIT_DAEMON_SHUTDOWN_SIGNAL_H_
#define REFIT_DAEMON_SHUTDOWN_SIGNAL_H_

#include <signal.h>

namespace refit::daemon {

inline sigset_t BlockShutdownSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return signals;
}

// Returns the signal received.
inline int WaitForShutdownSignal(const sigset_t& signals) {
  int received = 0;
  sigwait(&signals, &received);
  return received;
}

}  // namespace refit::daemon

#endif  // REFIT_DAEMON_SHUTDOWN_SIGNAL_H_

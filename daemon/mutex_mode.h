// How the daemons' Abseil mutexes run. Debian's Abseil is built without NDEBUG, so every
// Mutex acquisition checks for lock-order cycles: a process-wide graph of held locks behind
// one global lock, with stack traces. That debugging aid serializes the threads of a busy
// process (a coordinator serving a hundred control streams, a daemon's copy threads), so
// the programs turn it off; the tests keep it.
#ifndef REFIT_DAEMON_MUTEX_MODE_H_
#define REFIT_DAEMON_MUTEX_MODE_H_

#include "absl/synchronization/mutex.h"

namespace refit::daemon {

// Call first thing in main, before any thread starts.
inline void SkipMutexDeadlockDetection() {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

}  // namespace refit::daemon

#endif  // REFIT_DAEMON_MUTEX_MODE_H_

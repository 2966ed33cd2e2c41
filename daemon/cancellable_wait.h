// A wait on an absl::Mutex that ends when its condition holds, its deadline passes or its
// caller gives up (a cancelled RPC), whichever comes first: the one loop behind every
// blocking call of the coordinator and refitd that a client can cancel.
#ifndef REFIT_DAEMON_CANCELLABLE_WAIT_H_
#define REFIT_DAEMON_CANCELLABLE_WAIT_H_

#include <algorithm>
#include <functional>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/monotonic_clock.h"

namespace refit::daemon {

// How long a waiter may go without asking whether its caller gave up.
inline constexpr absl::Duration kCancelPollInterval = absl::Milliseconds(100);

// With `mu` held, waits until `condition` holds (true), or until `deadline` passes or
// `cancelled` (may be empty) says so (false). The deadline is measured on the monotonic clock
// from the call on: a step of the wall clock during the wait does not move it. (abseil's own
// waits sleep until a wall-clock time, so one poll interval may still stretch by a step back.)
inline bool AwaitCancellable(absl::Mutex& mu, const absl::Condition& condition, absl::Time deadline,
                             const std::function<bool()>& cancelled)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
  const absl::Duration end = MonotonicNow() + (deadline - absl::Now());
  while (!condition.Eval()) {
    const absl::Duration left = end - MonotonicNow();
    if (left <= absl::ZeroDuration() || (cancelled && cancelled())) return false;
    mu.AwaitWithTimeout(condition, std::min(left, kCancelPollInterval));
  }
  return true;
}

}  // namespace refit::daemon

#endif  // REFIT_DAEMON_CANCELLABLE_WAIT_H_

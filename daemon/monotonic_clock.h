// Time for durations that must not jump: leases and hello deadlines are measured on the
// monotonic clock, so a step of the wall clock (NTP, an operator) neither cuts every daemon
// at once (forward) nor keeps a dead one in the group (back).
#ifndef REFIT_DAEMON_MONOTONIC_CLOCK_H_
#define REFIT_DAEMON_MONOTONIC_CLOCK_H_

#include <chrono>

#include "absl/time/time.h"

namespace refit::daemon {

// Time since an arbitrary fixed point, from CLOCK_MONOTONIC.
inline absl::Duration MonotonicNow() {
  return absl::FromChrono(std::chrono::steady_clock::now().time_since_epoch());
}

}  // namespace refit::daemon

#endif  // REFIT_DAEMON_MONOTONIC_CLOCK_H_

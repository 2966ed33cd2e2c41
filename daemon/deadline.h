// A point in time that a step of the wall clock does not move: measured on the monotonic
// clock from when it was set. Refit deadlines, pause rounds and waits for publishes are
// Deadlines, so an NTP or operator step neither ends a waiting Refit at once (forward) nor
// stretches it (back). APIs that take an absl::Time get ToTime(), read just before the call.
#ifndef REFIT_DAEMON_DEADLINE_H_
#define REFIT_DAEMON_DEADLINE_H_

#include <algorithm>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "daemon/monotonic_clock.h"

namespace refit::daemon {

class Deadline {
 public:
  // `duration` from now (InfiniteDuration: never).
  static Deadline In(absl::Duration duration) { return Deadline(MonotonicNow() + duration); }
  static Deadline Never() { return Deadline(absl::InfiniteDuration()); }

  // Time left (negative once passed).
  absl::Duration Left() const { return at_ - MonotonicNow(); }
  bool Passed() const { return Left() <= absl::ZeroDuration(); }
  // The earlier of this and `duration` from now.
  Deadline Within(absl::Duration duration) const { return std::min(*this, In(duration)); }
  // The wall-clock time that is Left() from now.
  absl::Time ToTime() const {
    return at_ == absl::InfiniteDuration() ? absl::InfiniteFuture() : absl::Now() + Left();
  }

  friend bool operator<(const Deadline& a, const Deadline& b) { return a.at_ < b.at_; }

 private:
  explicit Deadline(absl::Duration at) : at_(at) {}
  absl::Duration at_;  // on MonotonicNow()'s scale
};

}  // namespace refit::daemon

#endif  // REFIT_DAEMON_DEADLINE_H_

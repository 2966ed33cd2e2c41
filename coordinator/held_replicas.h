// The complete destination replicas the last vetting held out of refits
// (coordinator/replica_vetting.h), each with its ranks' registrations then and why, and what
// each rank's daemon must hear when that changes: a replica newly held (or held for another
// reason, or with ranks registered anew) has its ranks answered "held, because ..."; one no
// longer held has those of its ranks still holding the same registration answered
// "accepted". A replica stays held while its ranks hold the registrations it was held for.
// Pure: no threads, no locks, no I/O.
//
// Threading: none of its own and not thread-safe; EpochRunner calls it under its mutex.
#ifndef REFIT_COORDINATOR_HELD_REPLICAS_H_
#define REFIT_COORDINATOR_HELD_REPLICAS_H_

#include <cstdint>
#include <map>
#include <vector>

#include "absl/status/status.h"
#include "coordinator/destination_replicas.h"
#include "coordinator/replica_vetting.h"
#include "proto/refit.pb.h"

namespace refit::daemon {

class HeldReplicas {
 public:
  struct Held {
    std::map<int64_t, uint64_t> registrations;  // its ranks' registrations when held
    absl::Status why;
  };
  // What `vetting` held, with the registrations now (`registrations`: rank -> registration)
  // of each held replica's ranks.
  static std::map<int64_t, Held> FromVetting(const ReplicaVetting& vetting,
                                             const DestinationReplicas& replicas,
                                             const std::map<int64_t, uint64_t>& registrations);

  // The answers that tell the ranks' daemons what changed from the replicas held before to
  // `now`, and `now` becomes the replicas held. `*newly_held`: the replicas held anew (or
  // anew for a reason or their ranks), ascending.
  std::vector<v1::RegistrationAnswer> Update(std::map<int64_t, Held> now,
                                             const std::map<int64_t, uint64_t>& registrations,
                                             std::vector<int64_t>* newly_held);

  // Moves the replicas of census->complete held (their ranks' `registrations` unchanged
  // since) into census->held, with why.
  void Exclude(const DestinationReplicas& replicas,
               const std::map<int64_t, uint64_t>& registrations, ReplicaCensus* census) const;

  const std::map<int64_t, Held>& held() const { return held_; }

 private:
  std::map<int64_t, Held> held_;
};

}  // namespace refit::daemon

#endif  // REFIT_COORDINATOR_HELD_REPLICAS_H_

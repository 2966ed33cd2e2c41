// A job's destination-replica policy (v1::ReplicaPolicy) for the coordinator's tests.
#ifndef REFIT_COORDINATOR_TESTING_REPLICA_POLICY_H_
#define REFIT_COORDINATOR_TESTING_REPLICA_POLICY_H_

#include <cstdint>

#include "proto/refit.pb.h"

namespace refit::daemon::testing {

inline v1::ReplicaPolicy ReplicaPolicyOf(int64_t ranks_per_replica, int64_t min_replicas = 1) {
  v1::ReplicaPolicy policy;
  policy.set_ranks_per_replica(ranks_per_replica);
  policy.set_min_replicas(min_replicas);
  return policy;
}

}  // namespace refit::daemon::testing

#endif  // REFIT_COORDINATOR_TESTING_REPLICA_POLICY_H_

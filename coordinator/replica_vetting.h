// Which complete destination replicas an epoch can write together, and why the others
// cannot. One misdeclared replica must not stop the others: a replica whose ranks declare a
// tensor differently, that does not hold a tensor whole, that the sources cannot fill (a
// tensor they lack, another shape or dtype), or that declares another format than the
// replicas chosen (FP8 beside BF16: one plan writes one format) is held out with the reason,
// and the others refit.
//
// Replicas that declare the same tensors and views are planned alike, so only one of each
// kind is tried against the sources, and only when the replicas are of more than one kind.
// Pure: no lock, no thread; the caller plans (PlanAlone) and keeps what was held.
#ifndef REFIT_COORDINATOR_REPLICA_VETTING_H_
#define REFIT_COORDINATOR_REPLICA_VETTING_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "coordinator/destination_replicas.h"
#include "proto/refit.pb.h"

namespace refit::daemon {

struct ReplicaVetting {
  std::vector<int64_t> fit;              // ascending
  std::map<int64_t, absl::Status> held;  // replica -> why, naming it
};

// Plans an epoch that writes replica `replica` alone; its error when it cannot be planned.
using PlanAlone = std::function<absl::Status(int64_t replica)>;

// Vets `complete` (replicas whose every rank is registered; `declarations`: rank -> its
// registration). Held: INVALID_ARGUMENT for a replica wrong in itself or against the
// sources, FAILED_PRECONDITION for a valid one of another format than the replicas chosen
// (the format most replicas declare; on a tie, that of the lowest-numbered replica). A plan
// that fails otherwise than INVALID_ARGUMENT (the sources are incomplete) holds nobody.
ReplicaVetting VetReplicas(
    const DestinationReplicas& replicas, const std::vector<int64_t>& complete,
    const std::map<int64_t, std::shared_ptr<const v1::RankRegistration>>& declarations,
    const PlanAlone& plan_alone);

}  // namespace refit::daemon

#endif  // REFIT_COORDINATOR_REPLICA_VETTING_H_

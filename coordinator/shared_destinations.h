// Which destination ranks a daemon's slice lists as shared destinations: the ranks in host
// shared memory that daemons of one host write straight into (PlanSlice's
// shared_destinations, PlanExecutor::WriteStraightInto).
#ifndef REFIT_COORDINATOR_SHARED_DESTINATIONS_H_
#define REFIT_COORDINATOR_SHARED_DESTINATIONS_H_

#include <cstdint>

#include "coordinator/cluster.h"
#include "proto/refit.pb.h"
#include "transport/rank_placement.h"

namespace refit::daemon {

// The ranks of `snapshot.shared_destinations` served by the daemons (`where`) of daemon
// `index`'s shared-memory domain, itself included, with the tensors their views hold; empty
// when that daemon said no domain. Every daemon of one domain gets the same list, so a
// source's daemon and a destination's daemon agree on which pieces go straight.
v1::LayoutSpec SharedDestinationsFor(const ClusterSnapshot& snapshot,
                                     const transport::RankPlacement& where, int32_t index);

}  // namespace refit::daemon

#endif  // REFIT_COORDINATOR_SHARED_DESTINATIONS_H_

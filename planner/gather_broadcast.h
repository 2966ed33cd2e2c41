// The conventional refit, planned so it can be priced and verified beside reshard: per
// tensor, gather the full tensor onto the GPUs of one source NVLink domain, broadcast it
// domain to domain (split over every NIC, forwarded over NVLink, as NCCL does), and let
// each destination slice its view out of its full copy.
#ifndef REFIT_PLANNER_GATHER_BROADCAST_H_
#define REFIT_PLANNER_GATHER_BROADCAST_H_

#include "absl/status/status.h"
#include "planner/options.h"
#include "planner/plan.h"
#include "planner/problem.h"

namespace refit::planner {

// Fills plan.pieces, plan.transfers (batched, unsorted) and plan.num_batches. Two batches
// per tensor: the gather, then the broadcast chain and the slicing, in issue order. Fails
// where that is more than kMaxBatches.
absl::Status PlanGatherBroadcast(const PlanningProblem& problem, const PlanOptions& options,
                                 Plan* plan);

}  // namespace refit::planner

#endif  // REFIT_PLANNER_GATHER_BROADCAST_H_

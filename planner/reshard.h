// The reshard strategy: every destination receives exactly the overlapping pieces from
// the best-placed source replica, the network is crossed once per NVLink domain, and
// pieces are balanced so that the most loaded link is as light as possible.
#ifndef REFIT_PLANNER_RESHARD_H_
#define REFIT_PLANNER_RESHARD_H_

#include <vector>

#include "absl/status/status.h"

#include "planner/lower_bound.h"
#include "planner/options.h"
#include "planner/plan.h"
#include "planner/problem.h"

namespace refit::planner {

// Fills plan.pieces, plan.transfers (batched, in batch order) and plan.num_batches. `bound`
// (of the same problem) tells when the sources' NICs would become the bottleneck, past
// which domains receive from domains served before them instead (options.relays).
// Fails (naming the staging budget) where the plan would need more than kMaxBatches.
absl::Status PlanReshard(const PlanningProblem& problem, const PlanOptions& options,
                         const LowerBound& bound, Plan* plan);

// Routes the plan PlanReshard would make but keeps only its link loads (no transfer list:
// a fraction of the memory and time), and returns the seconds its busiest link needs for
// all its bytes, which no pricing of that plan can go below.
double ReshardBusiestLinkSeconds(const PlanningProblem& problem, const PlanOptions& options,
                                 const LowerBound& bound);

// The plan PlanReshard would make, routed and batched but not kept: what pricing it would
// give with one message per batch and rank (the fewest), a floor of its predicted seconds
// tighter than its busiest link (every batch pays for its own busiest link).
double ReshardBatchedFloorSeconds(const PlanningProblem& problem, const PlanOptions& options,
                                  const LowerBound& bound);

}  // namespace refit::planner

#endif  // REFIT_PLANNER_RESHARD_H_

// The reshard strategy: every destination receives exactly the overlapping pieces from
// the best-placed source replica, the network is crossed once per NVLink domain, and
// pieces are balanced so that the most loaded link is as light as possible.
#ifndef REFIT_PLANNER_RESHARD_H_
#define REFIT_PLANNER_RESHARD_H_

#include <limits>
#include <vector>

#include "planner/lower_bound.h"
#include "planner/options.h"
#include "planner/plan.h"
#include "planner/problem.h"

namespace refit::planner {

// Fills plan.pieces, plan.transfers (batched, unsorted) and plan.num_batches. `bound`
// (of the same problem) tells when the sources' NICs would become the bottleneck, past
// which domains receive from domains served before them instead (options.relays).
// Returns the seconds its busiest link needs for all its bytes, which no pricing of the
// plan can go below. When that exceeds `batch_only_below_seconds` the plan is left
// unbatched (num_batches 0, not to be priced or run): it cannot beat a plan that fast.
double PlanReshard(const PlanningProblem& problem, const PlanOptions& options,
                   const LowerBound& bound, Plan* plan,
                   double batch_only_below_seconds = std::numeric_limits<double>::infinity());

}  // namespace refit::planner

#endif  // REFIT_PLANNER_RESHARD_H_

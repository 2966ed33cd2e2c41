// Symbolic plan check (no memory allocated, so it runs on DeepSeek-V3 at 512 ranks):
// every destination element is written exactly once, from an endpoint that holds the same
// global coordinates of the same tensor, and forwarded data is read only after it arrived.
#ifndef REFIT_PLANNER_CHECK_COVERAGE_CHECKER_H_
#define REFIT_PLANNER_CHECK_COVERAGE_CHECKER_H_

#include "absl/status/status.h"
#include "planner/layout.h"
#include "planner/plan.h"

namespace refit::check {

// OK, or FAILED_PRECONDITION naming the tensor, the rank and the box that is wrong.
absl::Status CheckCoverage(const planner::Layout& sources, const planner::Layout& destinations,
                           const planner::Plan& plan);

}  // namespace refit::check

#endif  // REFIT_PLANNER_CHECK_COVERAGE_CHECKER_H_

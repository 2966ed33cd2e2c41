// A plan's digest: a 128-bit hash of its strategy, every transfer (endpoints, tensor, box,
// batch, route) and what the plan's indices name on the wire (each side's rank ids, view
// ids and tensor names), computed from fixed-width fields so every machine agrees. Two
// plans with one digest send every daemon the same slice: refitd keeps its slice by it.
#ifndef REFIT_PLANNER_DIGEST_H_
#define REFIT_PLANNER_DIGEST_H_

#include <string>

#include "planner/plan.h"

namespace refit::planner {

// 32 lowercase hex digits.
std::string PlanDigest(const Plan& plan, const Layout& sources, const Layout& destinations);

}  // namespace refit::planner

#endif  // REFIT_PLANNER_DIGEST_H_

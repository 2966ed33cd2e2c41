// A plan's digest: a 128-bit hash of its strategy and every transfer (endpoints, tensor,
// box, batch, route), computed from fixed-width fields so every machine agrees.
#ifndef REFIT_PLANNER_DIGEST_H_
#define REFIT_PLANNER_DIGEST_H_

#include <string>

#include "planner/plan.h"

namespace refit::planner {

// 32 lowercase hex digits.
std::string PlanDigest(const Plan& plan);

}  // namespace refit::planner

#endif  // REFIT_PLANNER_DIGEST_H_

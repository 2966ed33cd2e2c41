// Prices a batched plan: each batch takes as long as its busiest link (bytes / bandwidth)
// plus a batch latency and a per-message latency for the busiest rank's peers; the plan
// takes the sum over batches. Also sorts transfers by batch and fills the byte counts.
#ifndef REFIT_PLANNER_COST_MODEL_H_
#define REFIT_PLANNER_COST_MODEL_H_

#include "planner/plan.h"
#include "planner/problem.h"

namespace refit::planner {

void PricePlan(const PlanningProblem& problem, Plan* plan);

}  // namespace refit::planner

#endif  // REFIT_PLANNER_COST_MODEL_H_

// Prices a batched plan: each batch takes as long as its busiest link (bytes / bandwidth)
// plus a batch latency and a per-message latency for the busiest rank's peers; the plan
// takes the sum over batches. Also sorts transfers by batch and fills the byte counts.
#ifndef REFIT_PLANNER_COST_MODEL_H_
#define REFIT_PLANNER_COST_MODEL_H_

#include <cstdint>

#include "planner/plan.h"
#include "planner/problem.h"
#include "planner/topology.h"

namespace refit::planner {

void PricePlan(const PlanningProblem& problem, Plan* plan);

// The latency a batch pays on top of its busiest link: its start, and one message per peer
// of its busiest rank (`max_peers`).
inline double BatchLatencySeconds(const Bandwidths& bandwidths, int32_t max_peers) {
  return bandwidths.batch_latency_s + max_peers * bandwidths.message_latency_s;
}

}  // namespace refit::planner

#endif  // REFIT_PLANNER_COST_MODEL_H_

#include "planner/planner.h"

#include <chrono>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "planner/cost_model.h"
#include "planner/digest.h"
#include "planner/gather_broadcast.h"
#include "planner/lower_bound.h"
#include "planner/problem.h"
#include "planner/reshard.h"

namespace refit::planner {

absl::StatusOr<std::shared_ptr<const Plan>> BuildPlan(const Layout& sources,
                                                      const Layout& destinations,
                                                      const v1::Topology& topology,
                                                      const PlanOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  if (options.strategy != kStrategyReshard && options.strategy != kStrategyGatherBroadcast) {
    return absl::InvalidArgumentError(absl::StrCat("unknown strategy \"", options.strategy,
                                                   "\" (expected reshard or gather_broadcast)"));
  }
  absl::StatusOr<std::unique_ptr<PlanningProblem>> problem =
      MakePlanningProblem(sources, destinations, topology);
  if (!problem.ok()) return problem.status();
  auto plan = std::make_shared<Plan>();
  const LowerBound bound = ComputeLowerBound(**problem);
  if (options.strategy == kStrategyReshard) {
    PlanReshard(**problem, options, bound, plan.get());
    PricePlan(**problem, plan.get());
    if (plan->stats.relayed_bytes > 0) plan->stats.direct_lower_bound_seconds = bound.direct_seconds;
    if (plan->stats.relayed_bytes > 0 && plan->stats.predicted_seconds >= bound.direct_seconds) {
      // Relays pay in batches what they save on the sources' NICs: kept only where the
      // cost model says they win. (Below what any direct plan takes, they win outright.)
      PlanOptions direct_options = options;
      direct_options.relays = false;
      auto direct = std::make_shared<Plan>();
      PlanReshard(**problem, direct_options, bound, direct.get());
      PricePlan(**problem, direct.get());
      if (direct->stats.predicted_seconds <= plan->stats.predicted_seconds) {
        plan = std::move(direct);
      } else {
        plan->stats.direct_predicted_seconds = direct->stats.predicted_seconds;
      }
    }
  } else {
    PlanGatherBroadcast(**problem, options, plan.get());
    PricePlan(**problem, plan.get());
  }
  plan->stats.lower_bound_network_bytes = bound.network_bytes;
  plan->stats.lower_bound_seconds = bound.seconds;
  plan->digest = PlanDigest(*plan);
  plan->plan_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return std::shared_ptr<const Plan>(std::move(plan));
}

absl::StatusOr<std::shared_ptr<const Plan>> PlanCache::GetOrBuild(const Layout& sources,
                                                                  const Layout& destinations,
                                                                  const v1::Topology& topology,
                                                                  const PlanOptions& options,
                                                                  bool* from_cache) {
  std::string topology_bytes;
  topology.SerializeToString(&topology_bytes);
  const std::string key =
      absl::StrCat(sources.digest, "/", destinations.digest, "/", options.strategy, "/",
                   options.staging_budget_bytes, "/", options.split_threshold_bytes, "/",
                   options.hierarchical, "/", options.relays, "/", topology_bytes);
  {
    absl::MutexLock lock(&mu_);
    auto it = plans_.find(key);
    if (it != plans_.end()) {
      if (from_cache != nullptr) *from_cache = true;
      return it->second;
    }
  }
  if (from_cache != nullptr) *from_cache = false;
  absl::StatusOr<std::shared_ptr<const Plan>> plan =
      BuildPlan(sources, destinations, topology, options);
  if (!plan.ok()) return plan.status();
  absl::MutexLock lock(&mu_);
  if (plans_.emplace(key, *plan).second) {
    order_.push_back(key);
    while (order_.size() > capacity_) {
      plans_.erase(order_.front());
      order_.pop_front();
    }
  }
  return plan;
}

}  // namespace refit::planner

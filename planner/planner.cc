#include "planner/planner.h"

#include <algorithm>
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

namespace {

// A priced plan's name among the candidates: "reshard_relays", "reshard_direct" or
// "gather_broadcast".
std::string CandidateName(const Plan& plan) {
  if (plan.strategy != kStrategyReshard) return plan.strategy;
  return plan.stats.relayed_bytes > 0 ? "reshard_relays" : "reshard_direct";
}

// The reshard plan: with relays where the options allow them and the cost model says they
// win, else without. Every plan it prices is added to `candidates`.
absl::StatusOr<std::shared_ptr<Plan>> PlanReshardChoosingRelays(
    const PlanningProblem& problem, const PlanOptions& options, const LowerBound& bound,
    std::vector<PlanCandidate>* candidates) {
  auto plan = std::make_shared<Plan>();
  absl::Status planned = PlanReshard(problem, options, bound, plan.get());
  if (!planned.ok()) return planned;
  PricePlan(problem, plan.get());
  const bool relays = plan->stats.relayed_bytes > 0;
  candidates->push_back({CandidateName(*plan), plan->stats.predicted_seconds});
  if (!relays) return plan;
  plan->stats.direct_lower_bound_seconds = bound.direct_seconds;
  // Relays pay in batches what they save on the sources' NICs: kept only where the cost
  // model says they win. (Below what any direct plan takes, they win outright.)
  if (plan->stats.predicted_seconds < bound.direct_seconds) return plan;
  PlanOptions direct_options = options;
  direct_options.relays = false;
  // Made and priced only if it has a chance to win. Two floors first, each found without
  // keeping the transfer list: its busiest link, then (where that is not enough) the sum
  // of each batch's busiest link.
  auto cannot_win = [&](double floor_seconds) {
    if (floor_seconds <= plan->stats.predicted_seconds) return false;
    candidates->push_back({"reshard_direct", floor_seconds, true});
    plan->stats.direct_lower_bound_seconds = std::max(bound.direct_seconds, floor_seconds);
    return true;
  };
  if (cannot_win(ReshardBusiestLinkSeconds(problem, direct_options, bound))) return plan;
  if (cannot_win(ReshardBatchedFloorSeconds(problem, direct_options, bound))) return plan;
  auto direct = std::make_shared<Plan>();
  planned = PlanReshard(problem, direct_options, bound, direct.get());
  if (!planned.ok()) return planned;
  PricePlan(problem, direct.get());
  candidates->push_back({CandidateName(*direct), direct->stats.predicted_seconds});
  if (direct->stats.predicted_seconds <= plan->stats.predicted_seconds) return direct;
  plan->stats.direct_predicted_seconds = direct->stats.predicted_seconds;
  return plan;
}

}  // namespace

absl::StatusOr<std::shared_ptr<const Plan>> BuildPlan(const Layout& sources,
                                                      const Layout& destinations,
                                                      const v1::Topology& topology,
                                                      const PlanOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  const bool reshard = options.strategy == kStrategyReshard || options.strategy == kStrategyAuto;
  const bool gather_broadcast =
      options.strategy == kStrategyGatherBroadcast || options.strategy == kStrategyAuto;
  if (!reshard && !gather_broadcast) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown strategy \"", options.strategy,
                     "\" (expected reshard, gather_broadcast or auto)"));
  }
  absl::StatusOr<std::unique_ptr<PlanningProblem>> problem =
      MakePlanningProblem(sources, destinations, topology);
  if (!problem.ok()) return problem.status();
  const LowerBound bound = ComputeLowerBound(**problem);
  std::vector<PlanCandidate> candidates;
  std::shared_ptr<Plan> plan;
  if (reshard) {
    absl::StatusOr<std::shared_ptr<Plan>> planned =
        PlanReshardChoosingRelays(**problem, options, bound, &candidates);
    if (!planned.ok()) return planned.status();
    plan = *std::move(planned);
  }
  if (gather_broadcast) {
    auto broadcast = std::make_shared<Plan>();
    absl::Status planned = PlanGatherBroadcast(**problem, options, broadcast.get());
    if (!planned.ok()) return planned;
    PricePlan(**problem, broadcast.get());
    candidates.push_back({CandidateName(*broadcast), broadcast->stats.predicted_seconds});
    // auto: reshard unless gather_broadcast is predicted faster.
    if (plan == nullptr || broadcast->stats.predicted_seconds < plan->stats.predicted_seconds) {
      plan = std::move(broadcast);
    }
  }
  plan->stats.candidates = std::move(candidates);
  plan->stats.chosen = CandidateName(*plan);
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
  const std::string key = absl::StrCat(
      sources.digest, "/", destinations.digest, "/", options.strategy, "/",
      options.staging_budget_bytes, "/", options.split_threshold_bytes, "/", options.hierarchical,
      "/", options.relays, "/", options.relay_buffers, "/", topology_bytes);
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

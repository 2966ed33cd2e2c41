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

// A plan the reshard strategy chose among its candidates, with the options that made it
// and its name among them.
struct ChosenReshard {
  std::shared_ptr<Plan> plan;
  PlanOptions options;
  std::string name;
};

// Made with `options` and priced where it has a chance to beat `best`: where one of two
// floors found without keeping the transfer list (its busiest link, then the sum of each
// batch's busiest link) is already above `best`, it is named among the candidates as
// taking at least that, and `floor_seconds` says how much (else 0). Returns the plan when
// priced (nullptr when not).
absl::StatusOr<std::shared_ptr<Plan>> PlanIfItMayWin(const PlanningProblem& problem,
                                                     const PlanOptions& options,
                                                     const LowerBound& bound, const Plan& best,
                                                     const std::string& name,
                                                     std::vector<PlanCandidate>* candidates,
                                                     double* floor_seconds) {
  *floor_seconds = 0;
  for (auto floor : {ReshardBusiestLinkSeconds, ReshardBatchedFloorSeconds}) {
    const double seconds = floor(problem, options, bound);
    if (seconds > best.stats.predicted_seconds) {
      candidates->push_back({name, seconds, true});
      *floor_seconds = seconds;
      return nullptr;
    }
  }
  auto plan = std::make_shared<Plan>();
  absl::Status planned = PlanReshard(problem, options, bound, plan.get());
  if (!planned.ok()) return planned;
  PricePlan(problem, plan.get());
  candidates->push_back({name, plan->stats.predicted_seconds});
  return plan;
}

// The reshard plan: with relays where the options allow them and the cost model says they
// win, else without. Every plan it prices is added to `candidates`.
absl::StatusOr<ChosenReshard> PlanReshardChoosingRelays(const PlanningProblem& problem,
                                                        const PlanOptions& options,
                                                        const LowerBound& bound,
                                                        std::vector<PlanCandidate>* candidates) {
  auto plan = std::make_shared<Plan>();
  absl::Status planned = PlanReshard(problem, options, bound, plan.get());
  if (!planned.ok()) return planned;
  PricePlan(problem, plan.get());
  const bool relays = plan->stats.relayed_bytes > 0;
  ChosenReshard chosen{plan, options, CandidateName(*plan)};
  candidates->push_back({chosen.name, plan->stats.predicted_seconds});
  if (!relays) return chosen;
  plan->stats.direct_lower_bound_seconds = bound.direct_seconds;
  // Relays pay in batches what they save on the sources' NICs: kept only where the cost
  // model says they win. (Below what any direct plan takes, they win outright.)
  if (plan->stats.predicted_seconds < bound.direct_seconds) return chosen;
  PlanOptions direct_options = options;
  direct_options.relays = false;
  double floor_seconds = 0;
  absl::StatusOr<std::shared_ptr<Plan>> direct = PlanIfItMayWin(
      problem, direct_options, bound, *plan, "reshard_direct", candidates, &floor_seconds);
  if (!direct.ok()) return direct.status();
  if (*direct == nullptr) {
    plan->stats.direct_lower_bound_seconds = std::max(bound.direct_seconds, floor_seconds);
    return chosen;
  }
  if ((*direct)->stats.predicted_seconds <= plan->stats.predicted_seconds) {
    return ChosenReshard{*direct, direct_options, CandidateName(**direct)};
  }
  plan->stats.direct_predicted_seconds = (*direct)->stats.predicted_seconds;
  return chosen;
}

// Relay buffers pay an NVLink hop for spreading what a domain receives over GPUs that are
// not destinations: where `chosen` uses them, the same plan without them is made (if it
// may win) and kept where the cost model prices it lower.
absl::StatusOr<ChosenReshard> ChooseRelayBuffers(const PlanningProblem& problem,
                                                 const LowerBound& bound, ChosenReshard chosen,
                                                 std::vector<PlanCandidate>* candidates) {
  if (chosen.plan->stats.relay_buffer_bytes == 0) return chosen;
  PlanOptions without = chosen.options;
  without.relay_buffers = false;
  const std::string name = chosen.name + "_without_relay_buffers";
  double floor_seconds = 0;
  absl::StatusOr<std::shared_ptr<Plan>> plan =
      PlanIfItMayWin(problem, without, bound, *chosen.plan, name, candidates, &floor_seconds);
  if (!plan.ok()) return plan.status();
  if (*plan == nullptr ||
      (*plan)->stats.predicted_seconds >= chosen.plan->stats.predicted_seconds) {
    return chosen;
  }
  // The relay figures are the chosen structure's, whichever way it holds its buffers.
  (*plan)->stats.direct_predicted_seconds = chosen.plan->stats.direct_predicted_seconds;
  (*plan)->stats.direct_lower_bound_seconds = chosen.plan->stats.direct_lower_bound_seconds;
  return ChosenReshard{*plan, without, name};
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
  std::string chosen_name;
  if (reshard) {
    absl::StatusOr<ChosenReshard> planned =
        PlanReshardChoosingRelays(**problem, options, bound, &candidates);
    if (planned.ok())
      planned = ChooseRelayBuffers(**problem, bound, *std::move(planned), &candidates);
    if (!planned.ok()) return planned.status();
    plan = std::move(planned->plan);
    chosen_name = std::move(planned->name);
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
      chosen_name = CandidateName(*plan);
    }
  }
  plan->stats.candidates = std::move(candidates);
  plan->stats.chosen = std::move(chosen_name);
  plan->stats.lower_bound_network_bytes = bound.network_bytes;
  plan->stats.lower_bound_seconds = bound.seconds;
  plan->digest = PlanDigest(*plan, sources, destinations);
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

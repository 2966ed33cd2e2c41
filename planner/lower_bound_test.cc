// The lower bound against plans no strategy of ours makes: on tiny random layouts, every
// way of delivering each destination piece (straight from any source that holds it, or
// forwarded from another destination that received it in an earlier batch, in chains and
// trees through other domains) is priced by the cost model, and none beats the bound; none
// whose network transfers all start at sources beats the bound for direct plans.
#include "planner/lower_bound.h"

#include <algorithm>
#include <functional>
#include <map>
#include <random>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "planner/cost_model.h"
#include "planner/layout.h"
#include "planner/problem.h"
#include "planner/testing/layout_builder.h"
#include "planner/topology.h"

namespace refit::planner {
namespace {

// One destination view's copy of one cover piece, and who may send it: a source view that
// holds it, or another destination view that needs the same piece.
struct Delivery {
  int32_t piece = 0;  // into the plan's pieces
  int32_t view = 0;   // destination view
  std::vector<int32_t> source_views;
  std::vector<int32_t> peers;  // indices into the deliveries of the same piece
};

struct Deliveries {
  std::vector<Piece> pieces;
  std::vector<std::vector<Delivery>> by_piece;
};

Deliveries EnumerateDeliveries(const PlanningProblem& problem) {
  Deliveries out;
  for (int32_t g = 0; g < static_cast<int32_t>(problem.destination_groups.size()); ++g) {
    const ViewGroup& group = problem.destination_groups[g];
    const int element_bytes = problem.destinations->tensors[group.tensor].element_bytes;
    for (const CoverPiece& cover : problem.destination_cover[g]) {
      const int32_t piece = static_cast<int32_t>(out.pieces.size());
      out.pieces.push_back(Piece{group.tensor, cover.box, BoxBytes(cover.box, element_bytes)});
      std::vector<Delivery> deliveries;
      for (int32_t v : group.views) {
        deliveries.push_back(
            Delivery{piece, v, problem.source_groups[cover.source_group].views, {}});
      }
      for (size_t i = 0; i < deliveries.size(); ++i) {
        for (size_t j = 0; j < deliveries.size(); ++j) {
          if (i != j) deliveries[i].peers.push_back(static_cast<int32_t>(j));
        }
      }
      out.by_piece.push_back(std::move(deliveries));
    }
  }
  return out;
}

// Each delivery's choice: < source_views.size() picks a source, else a peer. A plan exists
// when the peers form a forest (no cycle); a delivery's batch is its depth in it.
bool BuildPlanOf(const PlanningProblem& problem, const Deliveries& deliveries,
                 const std::vector<std::vector<int>>& choice, Plan* plan) {
  plan->pieces = deliveries.pieces;
  plan->transfers.clear();
  plan->num_batches = 0;
  const ClusterMap& cluster = *problem.cluster;
  for (size_t p = 0; p < deliveries.by_piece.size(); ++p) {
    const std::vector<Delivery>& group = deliveries.by_piece[p];
    std::vector<int> depth(group.size(), -1);
    std::function<int(size_t, int)> depth_of = [&](size_t d, int hops) -> int {
      if (hops > static_cast<int>(group.size())) return -1;  // a cycle
      if (depth[d] >= 0) return depth[d];
      const int c = choice[p][d];
      if (c < static_cast<int>(group[d].source_views.size())) return depth[d] = 0;
      const int parent = group[d].peers[c - group[d].source_views.size()];
      const int above = depth_of(parent, hops + 1);
      return above < 0 ? -1 : depth[d] = above + 1;
    };
    for (size_t d = 0; d < group.size(); ++d) {
      if (depth_of(d, 0) < 0) return false;
      Transfer t;
      const int c = choice[p][d];
      if (c < static_cast<int>(group[d].source_views.size())) {
        const int32_t h = group[d].source_views[c];
        t.src = {EndpointKind::kSourceView, problem.sources->views[h].rank_index, h};
      } else {
        const int32_t w = group[group[d].peers[c - group[d].source_views.size()]].view;
        t.src = {EndpointKind::kDestinationView, problem.destinations->views[w].rank_index, w};
      }
      t.dst = {EndpointKind::kDestinationView,
               problem.destinations->views[group[d].view].rank_index, group[d].view};
      t.piece = static_cast<int32_t>(p);
      t.batch = depth[d];
      t.route = cluster.RouteBetween(cluster.EndpointGpu(t.src), cluster.EndpointGpu(t.dst));
      plan->num_batches = std::max(plan->num_batches, t.batch + 1);
      plan->transfers.push_back(t);
    }
  }
  return true;
}

TEST(LowerBoundTest, NoPlanOnTinyLayoutsBeatsIt) {
  std::mt19937_64 rng(0xB0B);
  refit::testing::RandomLayoutOptions options;
  options.max_tensors = 2;
  options.max_ranks = 4;
  options.max_volume = 48;
  options.fused_buffers = false;
  int64_t plans_priced = 0, relayed_plans = 0, direct_plans = 0;
  for (int trial = 0; trial < 300; ++trial) {
    options.colocated = trial % 3 == 0;
    const refit::testing::LayoutPair pair = refit::testing::RandomLayoutPair(rng, options);
    SCOPED_TRACE(::testing::Message() << "trial " << trial << ": " << pair.description);
    absl::StatusOr<Layout> sources = CompileLayout(pair.sources, "source");
    ASSERT_TRUE(sources.ok()) << sources.status();
    absl::StatusOr<Layout> destinations = CompileLayout(pair.destinations, "destination");
    ASSERT_TRUE(destinations.ok()) << destinations.status();
    absl::StatusOr<std::unique_ptr<PlanningProblem>> problem =
        MakePlanningProblem(*sources, *destinations, refit::testing::SlowLinksTopology());
    ASSERT_TRUE(problem.ok()) << problem.status();
    const LowerBound bound = ComputeLowerBound(**problem);
    const Deliveries deliveries = EnumerateDeliveries(**problem);

    // Every combination when there are few, else a random sample of them.
    std::vector<std::vector<int>> options_of(deliveries.by_piece.size());
    double combinations = 1;
    for (size_t p = 0; p < deliveries.by_piece.size(); ++p) {
      for (const Delivery& d : deliveries.by_piece[p]) {
        options_of[p].push_back(static_cast<int>(d.source_views.size() + d.peers.size()));
        combinations *= options_of[p].back();
      }
    }
    const bool exhaustive = combinations <= 4096;
    std::vector<std::vector<int>> choice(deliveries.by_piece.size());
    for (size_t p = 0; p < choice.size(); ++p) choice[p].assign(options_of[p].size(), 0);
    for (int64_t n = 0; n < (exhaustive ? static_cast<int64_t>(combinations) : 4096); ++n) {
      if (exhaustive) {
        int64_t rest = n;
        for (size_t p = 0; p < choice.size(); ++p) {
          for (size_t d = 0; d < choice[p].size(); ++d) {
            choice[p][d] = static_cast<int>(rest % options_of[p][d]);
            rest /= options_of[p][d];
          }
        }
      } else {
        for (size_t p = 0; p < choice.size(); ++p) {
          for (size_t d = 0; d < choice[p].size(); ++d) {
            choice[p][d] = static_cast<int>(rng() % options_of[p][d]);
          }
        }
      }
      Plan plan;
      if (!BuildPlanOf(**problem, deliveries, choice, &plan)) continue;
      PricePlan(**problem, &plan);
      ++plans_priced;
      relayed_plans += plan.num_batches > 1;
      ASSERT_LE(bound.seconds, plan.stats.predicted_seconds * (1 + 1e-12)) << "combination " << n;
      ASSERT_LE(bound.network_bytes, plan.stats.network_bytes) << "combination " << n;
      // A plan whose network transfers all start at sources is bounded by the direct bound.
      const bool direct = std::none_of(
          plan.transfers.begin(), plan.transfers.end(),
          [](const Transfer& t) { return t.route == v1::ROUTE_NETWORK && !t.src.IsSourceSide(); });
      direct_plans += direct;
      if (direct) {
        ASSERT_LE(bound.direct_seconds, plan.stats.predicted_seconds * (1 + 1e-12))
            << "combination " << n;
      }
    }
  }
  // The search really priced relayed plans, not only direct ones.
  EXPECT_GT(plans_priced, 10000);
  EXPECT_GT(relayed_plans, plans_priced / 4);
  EXPECT_GT(direct_plans, 1000);
}

// Without relays a source GPU sends each of its pieces once for every domain that needs it:
// what one GPU alone holds weighs on that GPU's NIC, and what a set of GPUs holds on the
// busiest of them, not on their domain's average.
LowerBound BoundForTrainerPairToThreeDomains(bool with_on_both) {
  refit::testing::LayoutBuilder sources, destinations;
  std::vector<std::string> tensors = {"only_on_0", "only_on_1"};
  if (with_on_both) tensors.push_back("on_both");
  const std::map<std::string, int64_t> rows = {{"only_on_0", 64}, {"only_on_1", 4}, {"on_both", 128}};
  for (const std::string& tensor : tensors) {
    sources.Tensor(tensor, {rows.at(tensor), 16});
    destinations.Tensor(tensor, {rows.at(tensor), 16});
    destinations.Replicated(tensor, {0, 1, 2});
  }
  sources.Rank(0, "trainer", 0).Rank(1, "trainer", 1);
  sources.Replicated("only_on_0", {0}).Replicated("only_on_1", {1});
  if (with_on_both) sources.Replicated("on_both", {0, 1});
  for (int64_t r = 0; r < 3; ++r) destinations.Rank(r, absl::StrCat("inference-", r), 0);
  absl::StatusOr<Layout> src = CompileLayout(sources.spec(), "source");
  absl::StatusOr<Layout> dst = CompileLayout(destinations.spec(), "destination");
  EXPECT_TRUE(src.ok() && dst.ok());
  absl::StatusOr<std::unique_ptr<PlanningProblem>> problem =
      MakePlanningProblem(*src, *dst, refit::testing::SlowLinksTopology());
  EXPECT_TRUE(problem.ok()) << problem.status();
  return ComputeLowerBound(**problem);
}

TEST(LowerBoundTest, WithoutRelaysEachSourceGpuSendsWhatOnlyItHolds) {
  const double nic = 50e3;  // SlowLinksTopology: bytes per second
  const int64_t only_on_0 = 64 * 16 * 4, only_on_1 = 4 * 16 * 4, on_both = 128 * 16 * 4;
  // GPU 0 sends only_on_0 to each of three domains (12,288 bytes), where their domain's
  // average is 6,528 and an inference NIC takes 4,352.
  const LowerBound alone = BoundForTrainerPairToThreeDomains(false);
  EXPECT_DOUBLE_EQ(alone.seconds, (only_on_0 + only_on_1) / nic);
  EXPECT_DOUBLE_EQ(alone.direct_seconds, 3.0 * only_on_0 / nic);
  // With a tensor on both, the pair sends everything three times: one of them at least
  // half of it (12,672 bytes), above GPU 0's own 12,288 and any inference NIC's 12,544.
  const LowerBound pair = BoundForTrainerPairToThreeDomains(true);
  EXPECT_DOUBLE_EQ(pair.seconds, (only_on_0 + only_on_1 + on_both) / nic);
  EXPECT_DOUBLE_EQ(pair.direct_seconds, 3.0 * (only_on_0 + only_on_1 + on_both) / 2 / nic);
}

}  // namespace
}  // namespace refit::planner

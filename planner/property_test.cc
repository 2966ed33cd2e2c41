// Property tests: for many random layout pairs (1 to 4 dims, uneven splits on up to 3
// dims, replication, fused and strided buffers), both strategies produce plans that the
// independent checkers accept: every destination byte right, every element written once;
// and neither beats the lower bound.
#include <random>

#include "gtest/gtest.h"
#include "planner/check/byte_checker.h"
#include "planner/check/coverage_checker.h"
#include "planner/layout.h"
#include "planner/planner.h"
#include "planner/testing/layout_builder.h"
#include "planner/topology.h"

namespace refit::planner {
namespace {

struct PropertyCase {
  const char* strategy;
  bool colocated;
  bool hierarchical;
  int64_t staging_budget;
};

class RandomLayoutsTest : public ::testing::TestWithParam<PropertyCase> {};

TEST_P(RandomLayoutsTest, EveryDestinationByteIsRight) {
  const PropertyCase& c = GetParam();
  std::mt19937_64 rng(0x5EED + c.colocated * 7 + c.hierarchical * 13 + c.staging_budget);
  refit::testing::RandomLayoutOptions options;
  options.colocated = c.colocated;
  PlanOptions plan_options;
  plan_options.strategy = c.strategy;
  plan_options.hierarchical = c.hierarchical;
  plan_options.staging_budget_bytes = c.staging_budget;
  plan_options.split_threshold_bytes = 64;  // exercise splitting across replicas
  for (int trial = 0; trial < 1000; ++trial) {
    const refit::testing::LayoutPair pair = refit::testing::RandomLayoutPair(rng, options);
    SCOPED_TRACE(::testing::Message() << "trial " << trial << ": " << pair.description);
    absl::StatusOr<Layout> sources = CompileLayout(pair.sources, "source");
    ASSERT_TRUE(sources.ok()) << sources.status();
    absl::StatusOr<Layout> destinations = CompileLayout(pair.destinations, "destination");
    ASSERT_TRUE(destinations.ok()) << destinations.status();
    absl::StatusOr<std::shared_ptr<const Plan>> plan =
        BuildPlan(*sources, *destinations, DgxH100Topology(), plan_options);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_TRUE(check::CheckBytes(*sources, *destinations, **plan, int64_t{1} << 28).ok())
        << check::CheckBytes(*sources, *destinations, **plan, int64_t{1} << 28);
    EXPECT_TRUE(check::CheckCoverage(*sources, *destinations, **plan).ok())
        << check::CheckCoverage(*sources, *destinations, **plan);
    // The bound holds for every plan of every strategy, also where bytes and not
    // latencies decide the time.
    EXPECT_LE((*plan)->stats.lower_bound_seconds, (*plan)->stats.predicted_seconds * (1 + 1e-12));
    EXPECT_LE((*plan)->stats.lower_bound_network_bytes, (*plan)->stats.network_bytes);
    absl::StatusOr<std::shared_ptr<const Plan>> slow =
        BuildPlan(*sources, *destinations, refit::testing::SlowLinksTopology(), plan_options);
    ASSERT_TRUE(slow.ok()) << slow.status();
    EXPECT_LE((*slow)->stats.lower_bound_seconds, (*slow)->stats.predicted_seconds * (1 + 1e-12));
    if (std::string(c.strategy) == kStrategyReshard && c.hierarchical) {
      // Reshard never crosses the network with more than the destinations need.
      EXPECT_EQ((*plan)->stats.network_bytes, (*plan)->stats.lower_bound_network_bytes);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Strategies, RandomLayoutsTest,
    ::testing::Values(PropertyCase{kStrategyReshard, false, true, 1 << 30},
                      PropertyCase{kStrategyReshard, true, true, 1 << 30},
                      PropertyCase{kStrategyReshard, false, false, 1 << 30},
                      PropertyCase{kStrategyReshard, false, true, 256},
                      PropertyCase{kStrategyGatherBroadcast, false, true, 1 << 30},
                      PropertyCase{kStrategyGatherBroadcast, true, true, 1 << 30}));

}  // namespace
}  // namespace refit::planner

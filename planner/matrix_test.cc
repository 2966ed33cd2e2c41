// The matrix of named reshards (planner/testing/matrix_cases.h): every case is planned with both
// strategies, executed on host memory and checked byte by byte and symbolically; reshard must meet
// the network lower bound and never send more over the network than gather-and-broadcast.
#include <functional>
#include <string>

#include "gtest/gtest.h"
#include "planner/check/byte_checker.h"
#include "planner/check/coverage_checker.h"
#include "planner/layout.h"
#include "planner/planner.h"
#include "planner/testing/layout_builder.h"
#include "planner/testing/matrix_cases.h"
#include "planner/topology.h"

namespace refit::planner {
namespace {

using refit::testing::LayoutBuilder;
using refit::testing::MatrixCase;
using refit::testing::MatrixCases;

class MatrixTest : public ::testing::TestWithParam<MatrixCase> {};

TEST_P(MatrixTest, BothStrategiesAreCorrectAndReshardMeetsTheBound) {
  LayoutBuilder src, dst;
  GetParam().build(&src, &dst);
  absl::StatusOr<Layout> sources = CompileLayout(src.spec(), "source");
  absl::StatusOr<Layout> destinations = CompileLayout(dst.spec(), "destination");
  ASSERT_TRUE(sources.ok()) << sources.status();
  ASSERT_TRUE(destinations.ok()) << destinations.status();
  int64_t network[2] = {0, 0};
  for (int s = 0; s < 2; ++s) {
    PlanOptions options;
    options.strategy = s == 0 ? kStrategyReshard : kStrategyGatherBroadcast;
    SCOPED_TRACE(options.strategy);
    absl::StatusOr<std::shared_ptr<const Plan>> plan =
        BuildPlan(*sources, *destinations, DgxH100Topology(), options);
    ASSERT_TRUE(plan.ok()) << plan.status();
    const absl::Status bytes = check::CheckBytes(*sources, *destinations, **plan, 1 << 24);
    EXPECT_TRUE(bytes.ok()) << bytes;
    const absl::Status coverage = check::CheckCoverage(*sources, *destinations, **plan);
    EXPECT_TRUE(coverage.ok()) << coverage;
    network[s] = (*plan)->stats.network_bytes;
    if (s == 0) {
      EXPECT_EQ(network[0], (*plan)->stats.lower_bound_network_bytes);
      EXPECT_LE((*plan)->stats.lower_bound_seconds, (*plan)->stats.predicted_seconds);
    }
  }
  EXPECT_LE(network[0], network[1]);
}

INSTANTIATE_TEST_SUITE_P(Reshards, MatrixTest, ::testing::ValuesIn(MatrixCases()),
                         [](const ::testing::TestParamInfo<MatrixCase>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace refit::planner

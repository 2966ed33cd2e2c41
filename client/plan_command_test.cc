// What `refitctl plan` does with a plan that is wrong: the checkers are run by the command,
// the report says NO, the error names what is missing, and the exit status is 1. A wrong
// plan cannot come out of the planner, so the test breaks a correct one itself.
#include "client/plan_command.h"

#include <sstream>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "planner/planner.h"
#include "planner/reference_refits.h"

namespace refit::client {
namespace {

class VerifyAndReportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<planner::RefitScenario> mini = planner::ReferenceRefit("mini");
    ASSERT_TRUE(mini.ok()) << mini.status();
    scenario_ = *mini;
    absl::StatusOr<planner::Layout> sources = planner::CompileLayout(mini->sources, "source");
    absl::StatusOr<planner::Layout> destinations =
        planner::CompileLayout(mini->destinations, "destination");
    ASSERT_TRUE(sources.ok() && destinations.ok());
    sources_ = *sources;
    destinations_ = *destinations;
    absl::StatusOr<std::shared_ptr<const planner::Plan>> plan =
        planner::BuildPlan(sources_, destinations_, mini->topology, planner::PlanOptions());
    ASSERT_TRUE(plan.ok()) << plan.status();
    plan_ = **plan;
  }
  int Run(const planner::Plan& plan, const std::string& verify) {
    PlanReportOptions options;
    options.verify = verify;
    options.topology = &scenario_.topology;
    out_.str("");
    err_.str("");
    return VerifyAndReport(plan, sources_, destinations_, options, out_, err_);
  }

  planner::RefitScenario scenario_;
  planner::Layout sources_, destinations_;
  planner::Plan plan_;
  std::ostringstream out_, err_;
};

// (The byte checker is wired the same way; it needs the model's bytes in memory, 1.2 GB
// here, so its own tests use smaller layouts.)
TEST_F(VerifyAndReportTest, ACorrectPlanIsVerified) {
  EXPECT_EQ(Run(plan_, "coverage"), kExitOk) << err_.str();
  EXPECT_TRUE(absl::StrContains(out_.str(), "verified        yes (coverage)")) << out_.str();
}

TEST_F(VerifyAndReportTest, APlanMissingATransferFailsVerificationWithExitOne) {
  ASSERT_GT(plan_.transfers.size(), 3u);
  planner::Plan broken = plan_;
  broken.transfers.erase(broken.transfers.begin() + 3);
  EXPECT_EQ(Run(broken, "coverage"), kExitVerifyFailed);
  EXPECT_TRUE(absl::StrContains(out_.str(), "verified        NO (coverage)")) << out_.str();
  EXPECT_TRUE(absl::StrContains(err_.str(), "verification failed: ")) << err_.str();
  EXPECT_TRUE(absl::StrContains(err_.str(), "destination rank")) << err_.str();
}

}  // namespace
}  // namespace refit::client

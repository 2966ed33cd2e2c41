// The shipped job files parse as refit.v1.JobSpec and their models expand into layouts.
#include <filesystem>

#include "config/json_files.h"
#include "gtest/gtest.h"
#include "planner/reference_refits.h"

namespace refit::daemon {
namespace {

TEST(JobFilesTest, EveryShippedJobParsesAndExpands) {
  int checked = 0;
  for (const auto& entry : std::filesystem::directory_iterator("deploy/jobs")) {
    SCOPED_TRACE(entry.path().string());
    v1::JobSpec job;
    ASSERT_TRUE(config::ReadJsonFile(entry.path().string(), &job).ok());
    EXPECT_FALSE(job.name().empty());
    absl::StatusOr<v1::ModelConfig> config = planner::BuiltinModelConfig(job.model());
    ASSERT_TRUE(config.ok()) << config.status();
    absl::StatusOr<planner::RefitScenario> scenario =
        planner::ModelRefit(*config, job.source_parallel(), job.destination_parallel(), 0, false);
    ASSERT_TRUE(scenario.ok()) << scenario.status();
    EXPECT_GT(scenario->sources.ranks_size(), 0);
    ++checked;
  }
  EXPECT_GE(checked, 2);
}

}  // namespace
}  // namespace refit::daemon

// Invalid jobs are refused with the field named; the shipped ones pass.
#include "coordinator/job_validation.h"

#include <cmath>
#include <filesystem>
#include <functional>
#include <string>

#include "config/json_files.h"
#include "gtest/gtest.h"

namespace refit::daemon {
namespace {

v1::JobSpec GoodJob() {
  v1::JobSpec job;
  job.set_name("mini-1");
  job.set_source_ranks(4);
  job.set_destination_ranks(4);
  return job;
}

void ExpectRefused(const std::function<void(v1::JobSpec*)>& spoil, const std::string& fragment) {
  v1::JobSpec job = GoodJob();
  spoil(&job);
  const absl::Status status = CheckJob(job);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << fragment;
  EXPECT_NE(status.message().find(fragment), std::string::npos) << status;
}

TEST(JobValidationTest, EveryFieldOutOfRangeIsRefusedByName) {
  EXPECT_TRUE(CheckJob(GoodJob()).ok());
  ExpectRefused([](v1::JobSpec* j) { j->set_source_ranks(-2); }, "job: sourceRanks -2");
  ExpectRefused([](v1::JobSpec* j) { j->set_destination_ranks(0); }, "job: destinationRanks 0");
  ExpectRefused([](v1::JobSpec* j) { j->set_lease_ms(1); }, "job: leaseMs 1 is outside 200");
  ExpectRefused([](v1::JobSpec* j) { j->set_lease_ms(-5000); }, "job: leaseMs -5000");
  ExpectRefused([](v1::JobSpec* j) { j->set_data_plane_stall_ms(5); },
                "job: dataPlaneStallMs 5 is outside 100");
  ExpectRefused([](v1::JobSpec* j) { j->set_epoch_deadline_ms(-1); }, "job: epochDeadlineMs -1");
  ExpectRefused([](v1::JobSpec* j) { j->set_source_replica_check_epochs(-4); },
                "job: sourceReplicaCheckEpochs -4 is outside 1 to 1000 epochs");
  ExpectRefused([](v1::JobSpec* j) { j->set_staging_budget_bytes(-1); },
                "job: stagingBudgetBytes -1 is negative");
  ExpectRefused([](v1::JobSpec* j) { j->set_strategy("broadcast"); },
                "job: strategy \"broadcast\" is not reshard, gather_broadcast or auto");
  ExpectRefused([](v1::JobSpec* j) { j->mutable_topology()->set_nic_gbytes_per_s(-50); },
                "job: topology.nicGbytesPerS -50");
  ExpectRefused([](v1::JobSpec* j) { j->mutable_topology()->set_batch_latency_us(NAN); },
                "job: topology.batchLatencyUs nan");
  ExpectRefused([](v1::JobSpec* j) { j->set_name("mini\n[info] forged"); },
                "job: name \"mini\\n[info] forged\" holds a character");
  ExpectRefused([](v1::JobSpec* j) { j->set_name(std::string(64, 'n')); },
                "job: name of 64 characters");
  ExpectRefused([](v1::JobSpec* j) { j->set_pause_deadline_ms(5); },
                "job: pauseDeadlineMs 5 is outside 10");
  ExpectRefused([](v1::JobSpec* j) { j->set_forget_daemons_after_ms(-1); },
                "job: forgetDaemonsAfterMs -1 is outside 1000");
  ExpectRefused([](v1::JobSpec* j) { j->mutable_destination_replicas(); },
                "job: destinationReplicas.ranksPerReplica 0 is not 1 to destinationRanks (4)");
  ExpectRefused([](v1::JobSpec* j) { j->mutable_destination_replicas()->set_ranks_per_replica(3); },
                "job: destinationReplicas.ranksPerReplica 3 does not divide destinationRanks");
  ExpectRefused(
      [](v1::JobSpec* j) {
        j->mutable_destination_replicas()->set_ranks_per_replica(2);
        j->mutable_destination_replicas()->set_min_replicas(3);
      },
      "job: destinationReplicas.minReplicas 3 is outside 0 to 2");
  v1::JobSpec replicas = GoodJob();
  replicas.mutable_destination_replicas()->set_ranks_per_replica(2);
  replicas.mutable_destination_replicas()->set_min_replicas(1);
  EXPECT_TRUE(CheckJob(replicas).ok());
}

TEST(JobValidationTest, RankCountsThatConflictWithTheModelAreRefused) {
  v1::JobSpec job = GoodJob();
  job.set_model("dsv3-mini");
  job.set_source_parallel("pp=2,ep=2");
  job.set_destination_parallel("tp=2,dp=2");
  EXPECT_TRUE(CheckJobRankCounts(job, 4, 4).ok());
  job.set_destination_ranks(3);
  const absl::Status status = CheckJobRankCounts(job, 4, 4);
  EXPECT_EQ(status.message(),
            "job: destinationRanks 3 conflicts with model dsv3-mini at pp=2,ep=2 -> tp=2,dp=2, "
            "which has 4");
}

TEST(JobValidationTest, TheShippedJobsPass) {
  int checked = 0;
  for (const auto& entry : std::filesystem::directory_iterator("deploy/jobs")) {
    SCOPED_TRACE(entry.path().string());
    v1::JobSpec job;
    ASSERT_TRUE(config::ReadJsonFile(entry.path().string(), &job).ok());
    // Counts come from the model (enough ranks for the replicas a job asks for); the rest
    // is checked as written.
    job.set_source_ranks(1);
    job.set_destination_ranks(
        job.has_destination_replicas() ? job.destination_replicas().ranks_per_replica() * 8 : 1);
    EXPECT_TRUE(CheckJob(job).ok()) << CheckJob(job);
    ++checked;
  }
  EXPECT_GE(checked, 2);
}

}  // namespace
}  // namespace refit::daemon

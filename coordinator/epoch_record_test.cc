#include "coordinator/epoch_record.h"

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace refit::daemon {
namespace {

std::string Node(int32_t daemon) { return absl::StrCat("node-", daemon); }

v1::EpochDone Success(const std::string& epoch, double seconds, int64_t rank = -1) {
  v1::EpochDone done;
  done.set_epoch_id(epoch);
  done.set_ok(true);
  done.set_seconds(seconds);
  v1::ViewChecksum* checksum = done.add_checksums();
  checksum->set_rank(rank);
  checksum->set_xxh64(static_cast<uint64_t>(seconds * 1000));
  if (rank >= 0) {
    v1::RankFinish* finish = done.add_finished();
    finish->set_rank(rank);
    finish->set_seconds(seconds);
  }
  return done;
}

v1::EpochDone Failure(const std::string& epoch, absl::StatusCode code, const std::string& error) {
  v1::EpochDone done;
  done.set_epoch_id(epoch);
  done.set_ok(false);
  done.set_code(static_cast<int>(code));
  done.set_error(error);
  return done;
}

TEST(EpochRecordTest, ACommittedEpochPassesEveryPhaseInOrderAndReportsAllBytes) {
  EpochRecord epoch("job-7", 12, {0, 1}, 1000);
  EXPECT_EQ(epoch.phase(), EpochPhase::kDistributing);
  EXPECT_TRUE(epoch.running());
  // A fast daemon reports before the launch returns.
  epoch.OnDone(1, Node(1), Success("job-7", 0.5, 3));
  ASSERT_TRUE(epoch.Launched().ok());
  EXPECT_EQ(epoch.phase(), EpochPhase::kExecuting);
  EXPECT_FALSE(epoch.Settled());
  epoch.OnProgress(0, 400);
  EXPECT_EQ(epoch.Progress().bytes_done(), 400);
  EXPECT_FALSE(epoch.Progress().finished());
  epoch.OnDone(0, Node(0), Success("job-7", 0.9, 2));
  EXPECT_TRUE(epoch.Settled());
  EXPECT_TRUE(epoch.ExecutionOutcome(Node).ok());
  ASSERT_TRUE(epoch.Verifying().ok());
  EXPECT_EQ(epoch.view_checksums().size(), 2u);
  ASSERT_TRUE(epoch.Commit().ok());
  EXPECT_EQ(epoch.phase(), EpochPhase::kCommitted);
  EXPECT_FALSE(epoch.running());
  const v1::EpochProgress progress = epoch.Progress();
  EXPECT_TRUE(progress.finished());
  EXPECT_TRUE(progress.committed());
  EXPECT_EQ(progress.bytes_done(), 1000);
  EXPECT_EQ(progress.bytes_total(), 1000);
  EXPECT_EQ(epoch.SlowestDaemon(), (std::pair<int32_t, double>{0, 0.9}));
  EXPECT_EQ(epoch.SlowestRank(), (std::pair<int64_t, double>{2, 0.9}));
}

TEST(EpochRecordTest, TransitionsOutOfOrderAreRefusedNamingTheEpochAndPhases) {
  EpochRecord epoch("job-1", 1, {0}, 10);
  absl::Status commit = epoch.Commit();
  EXPECT_EQ(commit.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(commit.message(), "job-1")) << commit;
  EXPECT_TRUE(absl::StrContains(commit.message(), "committed while distributing")) << commit;
  EXPECT_EQ(epoch.phase(), EpochPhase::kDistributing);
  EXPECT_FALSE(epoch.Verifying().ok());
  ASSERT_TRUE(epoch.Launched().ok());
  EXPECT_FALSE(epoch.Launched().ok());
  // Not every daemon reported: nothing to verify yet.
  absl::Status verifying = epoch.Verifying();
  EXPECT_TRUE(absl::StrContains(verifying.message(), "reports are missing")) << verifying;
  EXPECT_EQ(epoch.phase(), EpochPhase::kExecuting);
  ASSERT_TRUE(epoch.Abort().ok());
  EXPECT_EQ(epoch.phase(), EpochPhase::kAborted);
  EXPECT_FALSE(epoch.Abort().ok());
  EXPECT_FALSE(epoch.Commit().ok());
  EXPECT_TRUE(epoch.Progress().finished());
  EXPECT_FALSE(epoch.Progress().committed());
}

TEST(EpochRecordTest, TheFirstFailureIsKeptWithTheDaemonsKindAndBlocksVerification) {
  EpochRecord epoch("job-2", 5, {0, 1, 2}, 10);
  ASSERT_TRUE(epoch.Launched().ok());
  epoch.OnDone(2, Node(2), Failure("job-2", absl::StatusCode::kDataLoss, "short message"));
  EXPECT_TRUE(epoch.Settled());  // a failure ends the wait
  epoch.OnDone(0, Node(0), Failure("job-2", absl::StatusCode::kUnavailable, "peer gone"));
  absl::Status outcome = epoch.ExecutionOutcome(Node);
  EXPECT_EQ(outcome.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(outcome.message(), "epoch job-2: refitd on node-2 failed: short message");
  absl::Status verifying = epoch.Verifying();
  EXPECT_TRUE(absl::StrContains(verifying.message(), "it failed")) << verifying;
  EXPECT_EQ(epoch.phase(), EpochPhase::kExecuting);
}

TEST(EpochRecordTest, ADaemonLostWhileTheChecksumsAreComparedRefusesTheCommit) {
  EpochRecord epoch("job-6", 6, {0, 1}, 10);
  ASSERT_TRUE(epoch.Launched().ok());
  epoch.OnDone(0, Node(0), Success("job-6", 0.1));
  epoch.OnDone(1, Node(1), Success("job-6", 0.2));
  ASSERT_TRUE(epoch.Verifying().ok());
  epoch.OnDaemonLost(1, absl::UnavailableError("refitd on node-1 left"));
  absl::Status commit = epoch.Commit();
  EXPECT_EQ(commit.code(), absl::StatusCode::kUnavailable) << commit;
  EXPECT_TRUE(absl::StrContains(commit.message(), "node-1 left")) << commit;
  EXPECT_EQ(epoch.phase(), EpochPhase::kVerifying);
  EXPECT_TRUE(epoch.Abort().ok());
}

TEST(EpochRecordTest, ADaemonsCancellationOrUnknownKindReadsAsAborted) {
  EXPECT_EQ(DaemonFailure("n", Failure("e", absl::StatusCode::kCancelled, "stopping")).code(),
            absl::StatusCode::kAborted);
  v1::EpochDone unknown = Failure("e", absl::StatusCode::kOk, "old daemon");
  EXPECT_EQ(DaemonFailure("n", unknown).code(), absl::StatusCode::kAborted);
  unknown.set_code(999);
  EXPECT_EQ(DaemonFailure("n", unknown).code(), absl::StatusCode::kAborted);
  EXPECT_EQ(DaemonFailure("n", Failure("e", absl::StatusCode::kDeadlineExceeded, "stall")).code(),
            absl::StatusCode::kDeadlineExceeded);
}

TEST(EpochRecordTest, ALostDaemonFailsTheEpochEvenAfterItReportedButOnlyIfItTakesPart) {
  EpochRecord epoch("job-3", 2, {0, 1}, 10);
  ASSERT_TRUE(epoch.Launched().ok());
  epoch.OnDaemonLost(5, absl::UnavailableError("refitd on node-5 left"));
  EXPECT_FALSE(epoch.Settled());
  epoch.OnDone(0, Node(0), Success("job-3", 0.1));
  // Its ranks would miss the commit.
  epoch.OnDaemonLost(0, absl::UnavailableError("refitd on node-0 left"));
  EXPECT_TRUE(epoch.Settled());
  EXPECT_EQ(epoch.ExecutionOutcome(Node).code(), absl::StatusCode::kUnavailable);
}

TEST(EpochRecordTest, ReportsAfterTheEndOrTwiceFromOneDaemonChangeNothing) {
  EpochRecord epoch("job-4", 3, {0, 1}, 10);
  ASSERT_TRUE(epoch.Launched().ok());
  epoch.OnDone(0, Node(0), Success("job-4", 0.2));
  epoch.OnDone(0, Node(0), Success("job-4", 0.7));  // a duplicate
  EXPECT_EQ(epoch.view_checksums().size(), 1u);
  EXPECT_EQ(epoch.SlowestDaemon().second, 0.2);
  ASSERT_TRUE(epoch.Abort().ok());
  epoch.OnDone(1, Node(1), Success("job-4", 0.3));
  epoch.OnProgress(1, 9);
  epoch.Fail(absl::InternalError("late"));
  EXPECT_EQ(epoch.view_checksums().size(), 1u);
  EXPECT_EQ(epoch.Progress().bytes_done(), 0);
}

TEST(EpochRecordTest, TheDeadlineOutcomeNamesTheDaemonsThatDidNotReport) {
  EpochRecord epoch("job-5", 4, {0, 1, 2}, 10);
  ASSERT_TRUE(epoch.Launched().ok());
  epoch.OnDone(1, Node(1), Success("job-5", 0.1));
  absl::Status outcome = epoch.ExecutionOutcome(Node);
  EXPECT_EQ(outcome.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(outcome.message(),
            "epoch job-5: refitd on node-0, node-2 did not finish before the deadline");
  // The caller's cancellation is a failure like any other: the first one wins.
  epoch.Fail(absl::CancelledError("the caller cancelled the refit"));
  EXPECT_EQ(epoch.ExecutionOutcome(Node).code(), absl::StatusCode::kCancelled);
}

}  // namespace
}  // namespace refit::daemon

// EpochExecutor on its own: a real registry over real shared memory, a real UCX worker, the
// planner's plan sliced for one daemon that holds every rank; no coordinator, no gRPC.
#include "refitd/epoch_executor.h"

#include <atomic>
#include <cstdint>

#include "absl/strings/match.h"
#include "coordinator/piece_checksums.h"
#include "coordinator/view_checksums.h"
#include "gtest/gtest.h"
#include "refitd/testing/one_daemon_refit.h"

namespace refit::daemon {
namespace {

class EpochExecutorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(refit_.SetUp(&registry_, "node-0").ok());
    ASSERT_TRUE(executor_.EnsureWorker());
  }

  v1::EpochDone Run(const v1::PlanSlice* slice) {
    // A copy each time: the executor keeps what it derived from a slice by its address.
    auto copy = slice == nullptr ? nullptr : std::make_shared<const v1::PlanSlice>(*slice);
    return executor_.Run(refit_.execute, copy, [this](int64_t delivered) {
      delivered_ = std::max(delivered_, delivered);
    });
  }

  RankRegistry registry_{"node-0"};
  testing::OneDaemonRefit refit_;
  transport::Interrupt interrupt_;
  transport::Interrupt stopping_;
  EpochExecutor executor_{"node-0",    &registry_, /*metrics=*/nullptr,
                          &interrupt_, &stopping_, [](const std::string&) {}};
  int64_t delivered_ = 0;
};

TEST_F(EpochExecutorTest, AnEpochWritesEveryDestinationByteAndReportsChecksumsThatAgree) {
  const int64_t poisoned = refit_.WrongDestinationBytes();
  ASSERT_GT(poisoned, 0);
  const v1::EpochDone done = Run(&refit_.slice);
  ASSERT_TRUE(done.ok()) << done.error();
  EXPECT_EQ(done.epoch_id(), "test-1");
  EXPECT_EQ(refit_.WrongDestinationBytes(), 0);
  EXPECT_EQ(delivered_, refit_.DestinationBytes());
  EXPECT_EQ(done.finished_size(), refit_.destinations().ranks_size());
  // What the coordinator does with the report: both kinds of checksum agree.
  absl::StatusOr<int64_t> views = CompareViewChecksums(
      refit_.sources(), refit_.destinations(), {done.checksums().begin(), done.checksums().end()});
  ASSERT_TRUE(views.ok()) << views.status();
  EXPECT_GT(*views, 0);
  absl::StatusOr<int64_t> pieces =
      ComparePieceChecksums(refit_.plan(), {done.pieces().begin(), done.pieces().end()});
  ASSERT_TRUE(pieces.ok()) << pieces.status();
  EXPECT_GT(*pieces, 0);
  // The epoch's hold on the buffers is gone: a rank may leave.
  EXPECT_TRUE(registry_.Deregister(v1::ROLE_DESTINATION, 0).ok());
}

TEST_F(EpochExecutorTest, AnEpochWithoutItsSliceFailsAsAPreconditionAndWritesNothing) {
  const int64_t poisoned = refit_.WrongDestinationBytes();
  v1::EpochDone done = Run(nullptr);
  EXPECT_FALSE(done.ok());
  EXPECT_EQ(done.code(), static_cast<int>(absl::StatusCode::kFailedPrecondition));
  EXPECT_TRUE(absl::StrContains(done.error(), "no plan slice")) << done.error();
  refit_.slice.set_digest("another plan");
  done = Run(&refit_.slice);
  EXPECT_EQ(done.code(), static_cast<int>(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(refit_.WrongDestinationBytes(), poisoned);
}

TEST_F(EpochExecutorTest, AnInterruptedEpochSaysSoAndWhetherRefitdIsStopping) {
  interrupt_.Raise("the coordinator aborted epoch test-1");
  v1::EpochDone done = Run(&refit_.slice);
  EXPECT_FALSE(done.ok());
  EXPECT_EQ(done.code(), static_cast<int>(absl::StatusCode::kCancelled)) << done.error();
  EXPECT_TRUE(absl::StrContains(done.error(), "the coordinator aborted epoch test-1"))
      << done.error();
  EXPECT_FALSE(absl::StrContains(done.error(), "shutting down")) << done.error();
  stopping_.Raise("refitd is stopping");
  done = Run(&refit_.slice);
  EXPECT_EQ(done.code(), static_cast<int>(absl::StatusCode::kCancelled)) << done.error();
  EXPECT_TRUE(absl::StartsWith(done.error(), "refitd is shutting down")) << done.error();
}

}  // namespace
}  // namespace refit::daemon

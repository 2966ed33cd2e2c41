// EpochExecutor on its own: a real registry over real shared memory, a real UCX worker, the
// planner's plan sliced for one daemon that holds every rank; no coordinator, no gRPC.
#include "refitd/epoch_executor.h"

#include <atomic>
#include <cstdint>

#include "absl/strings/match.h"
#include "coordinator/piece_checksums.h"
#include "coordinator/view_checksums.h"
#include "gtest/gtest.h"
#include "planner/layout.h"
#include "planner/plan_proto.h"
#include "planner/planner.h"
#include "planner/testing/layout_builder.h"
#include "planner/topology.h"
#include "transport/plan_slice.h"
#include "transport/testing/backed_layouts.h"

namespace refit::daemon {
namespace {

class EpochExecutorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const refit::testing::LayoutPair pair = refit::testing::RowsToColumnsPair();
    sources_ = backed_.Back(pair.sources, "source");
    destinations_ = backed_.Back(pair.destinations, "destination");
    for (const v1::RankLayout& r : sources_.ranks()) Register(v1::ROLE_SOURCE, r, sources_);
    for (const v1::RankLayout& r : destinations_.ranks()) {
      Register(v1::ROLE_DESTINATION, r, destinations_);
    }
    {
      RankRegistry::BufferHold hold = registry_.HoldBuffers();
      for (const v1::RankLayout& r : sources_.ranks()) {
        transport::testing::FillViews(&hold.mutable_buffers(), v1::ROLE_SOURCE, r);
      }
    }
    const planner::Layout src = *planner::CompileLayout(pair.sources, "source");
    const planner::Layout dst = *planner::CompileLayout(pair.destinations, "destination");
    auto plan = planner::BuildPlan(src, dst, planner::DgxH100Topology(), planner::PlanOptions());
    ASSERT_TRUE(plan.ok()) << plan.status();
    plan_ = planner::PlanToProto(**plan, src, dst);
    // One daemon (index 0) holds every rank.
    transport::RankPlacement here;
    here.SetDefault(0);
    slice_.set_digest(plan_.digest());
    *slice_.mutable_plan() = transport::SlicePlan(plan_, here, 0);
    slice_.set_daemon_index(0);
    v1::DaemonPeer* self = slice_.add_daemons();
    self->set_index(0);
    self->set_node("node-0");
    for (const auto& [role, spec] :
         {std::pair{v1::ROLE_SOURCE, &sources_}, std::pair{v1::ROLE_DESTINATION, &destinations_}}) {
      for (const v1::RankLayout& r : spec->ranks()) {
        v1::RankPlacement* p = slice_.add_placement();
        p->set_role(role);
        p->set_rank(r.rank());
        p->set_daemon(0);
      }
    }
    execute_.set_epoch_id("test-1");
    execute_.set_version(1);
    execute_.set_plan_digest(plan_.digest());
    execute_.set_deadline_ms(20000);
    execute_.set_epoch_number(1);
    execute_.set_checksums(true);
    ASSERT_TRUE(executor_.EnsureWorker());
  }

  void Register(v1::Role role, const v1::RankLayout& rank, const v1::LayoutSpec& spec) {
    v1::RegisterRankRequest request;
    request.set_role(role);
    *request.mutable_layout() = rank;
    *request.mutable_tensors() = spec.tensors();
    ASSERT_TRUE(registry_.Register(request).ok());
  }

  // Destination bytes that do not hold their element's value.
  int64_t WrongDestinationBytes() {
    RankRegistry::BufferHold hold = registry_.HoldBuffers();
    int64_t wrong = 0;
    for (const v1::RankLayout& r : destinations_.ranks()) {
      wrong += transport::testing::WrongBytes(hold.buffers(), v1::ROLE_DESTINATION, r);
    }
    return wrong;
  }

  v1::EpochDone Run(const v1::PlanSlice* slice) {
    // A copy each time: the executor keeps what it derived from a slice by its address.
    auto copy = slice == nullptr ? nullptr : std::make_shared<const v1::PlanSlice>(*slice);
    return executor_.Run(execute_, copy, [this](int64_t delivered) {
      delivered_ = std::max(delivered_, delivered);
    });
  }

  transport::testing::BackedLayouts backed_;
  v1::LayoutSpec sources_, destinations_;
  RankRegistry registry_{"node-0"};
  std::atomic<bool> interrupt_{false};
  std::atomic<bool> stopping_{false};
  EpochExecutor executor_{"node-0",    &registry_, /*metrics=*/nullptr,
                          &interrupt_, &stopping_, [](const std::string&) {}};
  v1::Plan plan_;
  v1::PlanSlice slice_;
  v1::ExecuteEpoch execute_;
  int64_t delivered_ = 0;
};

TEST_F(EpochExecutorTest, AnEpochWritesEveryDestinationByteAndReportsChecksumsThatAgree) {
  const int64_t poisoned = WrongDestinationBytes();
  ASSERT_GT(poisoned, 0);
  const v1::EpochDone done = Run(&slice_);
  ASSERT_TRUE(done.ok()) << done.error();
  EXPECT_EQ(done.epoch_id(), "test-1");
  EXPECT_EQ(WrongDestinationBytes(), 0);
  int64_t destination_bytes = 0;
  for (const v1::Batch& batch : plan_.batches()) {
    for (const v1::Transfer& t : batch.transfers()) {
      if (t.dst().kind() == v1::ENDPOINT_DESTINATION_VIEW) destination_bytes += t.bytes();
    }
  }
  EXPECT_EQ(delivered_, destination_bytes);
  EXPECT_EQ(done.finished_size(), destinations_.ranks_size());
  // What the coordinator does with the report: both kinds of checksum agree.
  absl::StatusOr<int64_t> views = CompareViewChecksums(
      sources_, destinations_, {done.checksums().begin(), done.checksums().end()});
  ASSERT_TRUE(views.ok()) << views.status();
  EXPECT_GT(*views, 0);
  absl::StatusOr<int64_t> pieces =
      ComparePieceChecksums(plan_, {done.pieces().begin(), done.pieces().end()});
  ASSERT_TRUE(pieces.ok()) << pieces.status();
  EXPECT_GT(*pieces, 0);
  // The epoch's hold on the buffers is gone: a rank may leave.
  EXPECT_TRUE(registry_.Deregister(v1::ROLE_DESTINATION, 0).ok());
}

TEST_F(EpochExecutorTest, AnEpochWithoutItsSliceFailsAsAPreconditionAndWritesNothing) {
  const int64_t poisoned = WrongDestinationBytes();
  v1::EpochDone done = Run(nullptr);
  EXPECT_FALSE(done.ok());
  EXPECT_EQ(done.code(), static_cast<int>(absl::StatusCode::kFailedPrecondition));
  EXPECT_TRUE(absl::StrContains(done.error(), "no plan slice")) << done.error();
  slice_.set_digest("another plan");
  done = Run(&slice_);
  EXPECT_EQ(done.code(), static_cast<int>(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(WrongDestinationBytes(), poisoned);
}

TEST_F(EpochExecutorTest, AnInterruptedEpochSaysSoAndWhetherRefitdIsStopping) {
  interrupt_ = true;
  v1::EpochDone done = Run(&slice_);
  EXPECT_FALSE(done.ok());
  EXPECT_EQ(done.code(), static_cast<int>(absl::StatusCode::kCancelled)) << done.error();
  EXPECT_FALSE(absl::StrContains(done.error(), "shutting down")) << done.error();
  stopping_ = true;
  done = Run(&slice_);
  EXPECT_EQ(done.code(), static_cast<int>(absl::StatusCode::kCancelled)) << done.error();
  EXPECT_TRUE(absl::StartsWith(done.error(), "refitd is shutting down")) << done.error();
}

}  // namespace
}  // namespace refit::daemon

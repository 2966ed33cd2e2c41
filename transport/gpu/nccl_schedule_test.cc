// The NCCL schedule, checked on CPU for every plan of the planner's test matrix and for
// random layout pairs, with both strategies: each daemon builds its GPUs' calls from its
// own plan slice (ScheduleStep, what the data plane issues), and the calls must mirror each
// other pair by pair, step by step, so no ncclGroupEnd can wait forever. Host-memory ranks
// stay off the communicator; dropping one piece from one slice must be caught.
#include "transport/gpu/nccl_schedule.h"

#include <functional>
#include <optional>
#include <random>

#include "gtest/gtest.h"
#include "planner/layout.h"
#include "planner/plan_proto.h"
#include "planner/planner.h"
#include "planner/testing/layout_builder.h"
#include "planner/testing/matrix_cases.h"
#include "planner/topology.h"
#include "transport/gpu/nccl_members.h"
#include "transport/plan_slice.h"

namespace refit::transport::gpu {
namespace {

struct Scheduled {
  absl::Status built;
  std::map<int32_t, GpuSchedule> schedules;
  int64_t nccl_bytes = 0;        // what the schedules send
  int64_t cross_host_bytes = 0;  // what the plan moves between GPU memory of different hosts
};

// Whether a rank's buffers are GPU memory (else host memory, which UCX carries).
using OnGpu = std::function<bool(v1::Role, int64_t)>;

// As the runtime does it: one daemon per host, the coordinator's NcclMembers over the
// placement, and each daemon numbering the communicator from its slice's fields and
// scheduling its GPUs from its own slice. `tamper` may change a daemon's slice before it
// is scheduled.
Scheduled ScheduleEverywhere(
    const v1::LayoutSpec& sources, const v1::LayoutSpec& destinations, const v1::Plan& plan,
    const std::function<void(int32_t, v1::Plan*)>& tamper = nullptr,
    const OnGpu& on_gpu = [](v1::Role, int64_t) { return true; }) {
  Scheduled out;
  std::map<std::string, int32_t> daemon_of_host;
  RankPlacement placement;
  std::vector<v1::RankPlacement> placed;
  for (auto [spec, role] :
       {std::pair{&sources, v1::ROLE_SOURCE}, std::pair{&destinations, v1::ROLE_DESTINATION}}) {
    for (const v1::RankLayout& r : spec->ranks()) {
      auto [it, added] = daemon_of_host.emplace(r.host(), daemon_of_host.size());
      placement.Place(role, r.rank(), it->second);
      v1::RankPlacement& p = placed.emplace_back();
      p.set_role(role);
      p.set_rank(r.rank());
      p.set_daemon(it->second);
      p.set_gpu(on_gpu(role, r.rank()));
      p.set_device(r.device());
    }
  }
  const std::optional<v1::NcclSetup> setup = NcclMembers(placed, plan);
  const CommunicatorRanks ranks = CommunicatorRanks::FromSetup(
      setup.value_or(v1::NcclSetup()),
      google::protobuf::RepeatedPtrField<v1::RankPlacement>(placed.begin(), placed.end()));
  for (const auto& [host, daemon] : daemon_of_host) {
    v1::Plan slice = SlicePlan(plan, placement, daemon);
    if (tamper) tamper(daemon, &slice);
    for (auto& [gpu, schedule] : ScheduleSlice(slice, ranks, ranks.OfDaemon(daemon))) {
      for (const auto& [step, calls] : schedule) {
        for (const NcclCall& call : calls) out.nccl_bytes += call.send ? call.bytes : 0;
      }
      out.schedules[gpu] = std::move(schedule);
    }
  }
  for (const v1::Batch& batch : plan.batches()) {
    for (const v1::Transfer& t : batch.transfers()) {
      const v1::Role src_role = EndpointRole(t.src().kind());
      const v1::Role dst_role = EndpointRole(t.dst().kind());
      if (*placement.DaemonOf(src_role, t.src().rank()) !=
              *placement.DaemonOf(dst_role, t.dst().rank()) &&
          on_gpu(src_role, t.src().rank()) && on_gpu(dst_role, t.dst().rank()) &&
          InGpuMemory(t.src().kind()) && InGpuMemory(t.dst().kind())) {
        out.cross_host_bytes += t.bytes();
      }
    }
  }
  out.built = CheckSchedules(out.schedules, ranks);
  return out;
}

v1::Plan PlanOf(const v1::LayoutSpec& sources, const v1::LayoutSpec& destinations,
                const std::string& strategy) {
  const planner::Layout src = *planner::CompileLayout(sources, "source");
  const planner::Layout dst = *planner::CompileLayout(destinations, "destination");
  planner::PlanOptions options;
  options.strategy = strategy;
  options.staging_budget_bytes = 4096;  // several batches
  auto plan = planner::BuildPlan(src, dst, planner::DgxH100Topology(), options);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return planner::PlanToProto(**plan, src, dst);
}

TEST(NcclScheduleTest, EveryMatrixPlanHasMatchingCalls) {
  int64_t nccl_bytes = 0;
  for (const refit::testing::MatrixCase& matrix_case : refit::testing::MatrixCases()) {
    refit::testing::LayoutBuilder src, dst;
    matrix_case.build(&src, &dst);
    for (const char* strategy : {planner::kStrategyReshard, planner::kStrategyGatherBroadcast}) {
      SCOPED_TRACE(matrix_case.name + " " + strategy);
      const v1::Plan plan = PlanOf(src.spec(), dst.spec(), strategy);
      const Scheduled scheduled = ScheduleEverywhere(src.spec(), dst.spec(), plan);
      EXPECT_TRUE(scheduled.built.ok()) << scheduled.built;
      EXPECT_EQ(scheduled.nccl_bytes, scheduled.cross_host_bytes);
      nccl_bytes += scheduled.nccl_bytes;
    }
  }
  EXPECT_GT(nccl_bytes, 0);  // the matrix does cross hosts
}

TEST(NcclScheduleTest, RandomLayoutPairsHaveMatchingCalls) {
  std::mt19937_64 rng(404);
  for (int trial = 0; trial < 200; ++trial) {
    const refit::testing::LayoutPair pair = refit::testing::RandomLayoutPair(rng, {});
    SCOPED_TRACE(::testing::Message() << "trial " << trial << ": " << pair.description);
    for (const char* strategy : {planner::kStrategyReshard, planner::kStrategyGatherBroadcast}) {
      const v1::Plan plan = PlanOf(pair.sources, pair.destinations, strategy);
      const Scheduled scheduled = ScheduleEverywhere(pair.sources, pair.destinations, plan);
      ASSERT_TRUE(scheduled.built.ok()) << strategy << ": " << scheduled.built;
      ASSERT_EQ(scheduled.nccl_bytes, scheduled.cross_host_bytes) << strategy;
    }
  }
}

TEST(NcclScheduleTest, HostMemoryRanksStayOffTheCommunicator) {
  std::mt19937_64 rng(405);
  int64_t nccl_bytes = 0;
  for (int trial = 0; trial < 100; ++trial) {
    const refit::testing::LayoutPair pair = refit::testing::RandomLayoutPair(rng, {});
    SCOPED_TRACE(::testing::Message() << "trial " << trial << ": " << pair.description);
    // Every third rank of each side in host memory.
    const OnGpu on_gpu = [](v1::Role role, int64_t rank) { return (rank + role) % 3 != 0; };
    for (const char* strategy : {planner::kStrategyReshard, planner::kStrategyGatherBroadcast}) {
      const v1::Plan plan = PlanOf(pair.sources, pair.destinations, strategy);
      const Scheduled scheduled =
          ScheduleEverywhere(pair.sources, pair.destinations, plan, nullptr, on_gpu);
      ASSERT_TRUE(scheduled.built.ok()) << strategy << ": " << scheduled.built;
      ASSERT_EQ(scheduled.nccl_bytes, scheduled.cross_host_bytes) << strategy;
      nccl_bytes += scheduled.nccl_bytes;
    }
  }
  EXPECT_GT(nccl_bytes, 0);
}

// Within a step, each GPU's calls go by peer, the send before the receive, one message per
// peer and direction holding its pieces in plan order.
TEST(NcclScheduleTest, AStepIssuesOneMessagePerPeerAndDirectionInOrder) {
  // Daemon 0 has GPUs 0 and 1, daemon 1 has GPU 2; source rank r and destination rank r
  // share GPU r.
  v1::NcclSetup setup;
  google::protobuf::RepeatedPtrField<v1::RankPlacement> placement;
  for (auto [daemon, device] : {std::pair{0, 0}, {0, 1}, {1, 0}}) {
    v1::NcclMember* member = setup.add_members();
    member->set_daemon(daemon);
    member->set_device(device);
    for (v1::Role role : {v1::ROLE_SOURCE, v1::ROLE_DESTINATION}) {
      v1::RankPlacement* p = placement.Add();
      p->set_role(role);
      p->set_rank(setup.members_size() - 1);
      p->set_daemon(daemon);
      p->set_gpu(true);
      p->set_device(device);
    }
  }
  const CommunicatorRanks ranks = CommunicatorRanks::FromSetup(setup, placement);
  std::vector<v1::Transfer> plan;
  auto piece = [&](int64_t src, int64_t dst, int64_t bytes) {
    v1::Transfer& t = plan.emplace_back();
    t.mutable_src()->set_kind(v1::ENDPOINT_SOURCE_VIEW);
    t.mutable_src()->set_rank(src);
    t.mutable_dst()->set_kind(v1::ENDPOINT_DESTINATION_VIEW);
    t.mutable_dst()->set_rank(dst);
    t.set_bytes(bytes);
  };
  piece(2, 1, 10);  // GPU 2 -> GPU 1
  piece(0, 2, 20);  // GPU 0 -> GPU 2
  piece(2, 0, 30);  // GPU 2 -> GPU 0
  piece(0, 1, 40);  // within daemon 0: CUDA IPC
  piece(0, 2, 50);  // GPU 0 -> GPU 2 again: same message
  std::vector<const v1::Transfer*> step;
  for (const v1::Transfer& t : plan) step.push_back(&t);

  const std::vector<NcclMessage> daemon0 = ScheduleStep(step, ranks, ranks.OfDaemon(0));
  ASSERT_EQ(daemon0.size(), 3u);
  EXPECT_EQ(daemon0[0].gpu, 0);
  EXPECT_EQ(daemon0[0].call, (NcclCall{true, 2, 70}));
  EXPECT_EQ(daemon0[0].pieces, (std::vector<const v1::Transfer*>{&plan[1], &plan[4]}));
  EXPECT_EQ(daemon0[1].gpu, 0);
  EXPECT_EQ(daemon0[1].call, (NcclCall{false, 2, 30}));
  EXPECT_EQ(daemon0[2].gpu, 1);
  EXPECT_EQ(daemon0[2].call, (NcclCall{false, 2, 10}));

  const std::vector<NcclMessage> daemon1 = ScheduleStep(step, ranks, ranks.OfDaemon(1));
  ASSERT_EQ(daemon1.size(), 3u);
  EXPECT_EQ(daemon1[0].call, (NcclCall{true, 0, 30}));
  EXPECT_EQ(daemon1[1].call, (NcclCall{false, 0, 70}));
  EXPECT_EQ(daemon1[2].call, (NcclCall{true, 1, 10}));
}

TEST(NcclScheduleTest, APieceMissingFromOneSliceIsCaught) {
  // Rows on two trainer hosts, columns on two inference hosts: every piece crosses hosts.
  refit::testing::LayoutBuilder src, dst;
  src.Tensor("w", {8, 8}).Rank(0, "t0", 0).Rank(1, "t1", 0);
  src.View(0, "w", {0, 0}, {4, 8}).View(1, "w", {4, 0}, {4, 8});
  dst.Tensor("w", {8, 8}).Rank(0, "i0", 0).Rank(1, "i1", 0);
  dst.View(0, "w", {0, 0}, {8, 4}).View(1, "w", {0, 4}, {8, 4});
  const v1::Plan plan = PlanOf(src.spec(), dst.spec(), planner::kStrategyReshard);
  ASSERT_TRUE(ScheduleEverywhere(src.spec(), dst.spec(), plan).built.ok());
  // The daemon of host i1 (index 3) loses the first piece it should receive.
  const Scheduled broken =
      ScheduleEverywhere(src.spec(), dst.spec(), plan, [](int32_t daemon, v1::Plan* slice) {
        if (daemon != 3) return;
        for (v1::Batch& batch : *slice->mutable_batches()) {
          if (batch.transfers_size() > 0) {
            batch.mutable_transfers()->erase(batch.mutable_transfers()->begin());
            return;
          }
        }
      });
  EXPECT_EQ(broken.built.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(broken.built.message().find("(daemon 3, device 0)"), std::string::npos) << broken.built;
}

}  // namespace
}  // namespace refit::transport::gpu

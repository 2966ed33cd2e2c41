// The NCCL schedule, checked on CPU for every plan of the planner's test matrix and for
// random layout pairs, with both strategies: each daemon builds its GPUs' calls from its
// own plan slice, and the calls must mirror each other pair by pair, step by step, so no
// ncclGroupEnd can wait forever. Dropping one piece from one slice must be caught.
#include "transport/gpu/nccl_schedule.h"

#include <random>

#include "gtest/gtest.h"
#include "planner/layout.h"
#include "planner/plan_proto.h"
#include "planner/planner.h"
#include "planner/testing/layout_builder.h"
#include "planner/testing/matrix_cases.h"
#include "planner/topology.h"
#include "transport/plan_slice.h"

namespace refit::transport::gpu {
namespace {

struct Scheduled {
  absl::Status built;
  std::map<int32_t, GpuSchedule> schedules;
  int64_t nccl_bytes = 0;        // what the schedules send
  int64_t cross_host_bytes = 0;  // what the plan moves between hosts
};

// One daemon per host; each schedules its GPUs from its own slice. `tamper` may change a
// daemon's slice before it is scheduled.
Scheduled ScheduleEverywhere(const v1::LayoutSpec& sources, const v1::LayoutSpec& destinations,
                             const v1::Plan& plan,
                             const std::function<void(int32_t, v1::Plan*)>& tamper = nullptr) {
  Scheduled out;
  const CommunicatorRanks ranks = CommunicatorRanks::FromLayouts(sources, destinations);
  std::map<std::string, int32_t> daemon_of_host;
  RankPlacement placement;
  for (auto [spec, role] :
       {std::pair{&sources, v1::ROLE_SOURCE}, std::pair{&destinations, v1::ROLE_DESTINATION}}) {
    for (const v1::RankLayout& r : spec->ranks()) {
      auto [it, added] = daemon_of_host.emplace(r.host(), daemon_of_host.size());
      placement.Place(role, r.rank(), it->second);
    }
  }
  for (const auto& [host, daemon] : daemon_of_host) {
    v1::Plan slice = SlicePlan(plan, placement, daemon);
    if (tamper) tamper(daemon, &slice);
    absl::StatusOr<std::map<int32_t, GpuSchedule>> mine =
        ScheduleSlice(slice, ranks, ranks.OnHost(host));
    if (!mine.ok()) {
      out.built = mine.status();
      return out;
    }
    for (auto& [gpu, schedule] : *mine) {
      for (const auto& [step, calls] : schedule) {
        for (const NcclCall& call : calls) out.nccl_bytes += call.send ? call.bytes : 0;
      }
      out.schedules[gpu] = std::move(schedule);
    }
  }
  for (const v1::Batch& batch : plan.batches()) {
    for (const v1::Transfer& t : batch.transfers()) {
      const int32_t from = *ranks.Of(EndpointRole(t.src().kind()), t.src().rank());
      const int32_t to = *ranks.Of(EndpointRole(t.dst().kind()), t.dst().rank());
      if (ranks.HostOf(from) != ranks.HostOf(to)) out.cross_host_bytes += t.bytes();
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
  EXPECT_NE(broken.built.message().find("(i1)"), std::string::npos) << broken.built;
}

}  // namespace
}  // namespace refit::transport::gpu

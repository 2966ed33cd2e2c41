// refitd's NCCL membership from plan slices: every member's NCCL rank is known to every
// daemon, a daemon with no member joins nothing, and one that cannot join (no GPU here)
// says so instead of routing pieces through a group it is not in.
#include "refitd/nccl_membership.h"

#include <optional>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "transport/gpu/gpu_support.h"

namespace refit::daemon {
namespace {

// Members (daemon, device): 1/0, 1/1, 2/0; source rank 0 on 1/1, destination rank 0 on
// 2/0 and destination rank 1 in host memory on daemon 0; this daemon is `self`.
v1::PlanSlice SliceOf(int32_t self) {
  v1::PlanSlice slice;
  slice.set_daemon_index(self);
  for (auto [role, rank, daemon, device] :
       {std::tuple{v1::ROLE_SOURCE, 0, 1, 1}, std::tuple{v1::ROLE_DESTINATION, 0, 2, 0},
        std::tuple{v1::ROLE_DESTINATION, 1, 0, -1}}) {
    v1::RankPlacement* p = slice.add_placement();
    p->set_role(role);
    p->set_rank(rank);
    p->set_daemon(daemon);
    p->set_gpu(device >= 0);
    p->set_device(device);
  }
  v1::NcclSetup* setup = slice.mutable_nccl();
  setup->set_unique_id(std::string(128, 'x'));
  for (auto [daemon, device] : {std::pair{1, 0}, {1, 1}, {2, 0}}) {
    v1::NcclMember* member = setup->add_members();
    member->set_daemon(daemon);
    member->set_device(device);
  }
  return slice;
}

TEST(NcclMembershipTest, ADaemonWithNoMemberKnowsEveryRankAndJoinsNothing) {
  transport::Interrupt interrupt;
  NcclMembership membership("node-0", &interrupt);
  transport::NcclRoute route;
  ASSERT_TRUE(membership.Join(SliceOf(0), absl::Now() + absl::Seconds(5), &route).ok());
  EXPECT_EQ(route.group, nullptr);
  EXPECT_TRUE(route.member_of.empty());
  EXPECT_TRUE(route.gpus.empty());
  // The members in the setup's order.
  ASSERT_EQ(route.ranks.size(), 3);
  const std::vector<std::pair<int32_t, int32_t>> expected = {{1, 0}, {1, 1}, {2, 0}};
  for (int32_t rank = 0; rank < 3; ++rank) {
    EXPECT_EQ(std::pair(route.ranks.DaemonOf(rank), route.ranks.DeviceOf(rank)), expected[rank]);
  }
  // Source rank 0 (GPU 1) to destination rank 0 (GPU 2) crosses daemons on GPUs: NCCL.
  v1::Transfer t;
  t.mutable_src()->set_kind(v1::ENDPOINT_SOURCE_VIEW);
  t.mutable_dst()->set_kind(v1::ENDPOINT_DESTINATION_VIEW);
  EXPECT_EQ(route.ranks.PairOf(t), std::optional(std::pair(1, 2)));
  // To destination rank 1, in host memory: not NCCL.
  t.mutable_dst()->set_rank(1);
  EXPECT_EQ(route.ranks.PairOf(t), std::nullopt);
}

TEST(NcclMembershipTest, AMemberThatCannotJoinFailsTheJoinAndHoldsNoGroup) {
  if (transport::gpu::DetectGpu().available) {
    GTEST_SKIP() << "a GPU is here: joining needs the group's other members";
  }
  transport::Interrupt interrupt;
  NcclMembership membership("node-1", &interrupt);
  transport::NcclRoute route;
  const absl::Status joined = membership.Join(SliceOf(1), absl::Now() + absl::Seconds(5), &route);
  EXPECT_FALSE(joined.ok());
  EXPECT_EQ(route.group, nullptr);
  // Its two GPUs are members 0 and 1 of this daemon, whatever happened.
  const std::map<int32_t, int> mine = {{0, 0}, {1, 1}};
  EXPECT_EQ(route.member_of, mine);
  EXPECT_EQ(route.gpus, (std::set<int32_t>{0, 1}));
}

}  // namespace
}  // namespace refit::daemon

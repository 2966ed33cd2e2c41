// refitd's NCCL membership from plan slices: every member's NCCL rank is known to every
// daemon, a daemon with no member joins nothing, and one that cannot join (no GPU here)
// says so instead of routing pieces through a group it is not in.
#include "daemon/nccl_membership.h"

#include "gtest/gtest.h"
#include "transport/gpu/gpu_support.h"

namespace refit::daemon {
namespace {

// Members (daemon, device): 1/0, 1/1, 2/0; this daemon is `self`.
v1::PlanSlice SliceOf(int32_t self) {
  v1::PlanSlice slice;
  slice.set_daemon_index(self);
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
  std::atomic<bool> interrupt{false};
  NcclMembership membership("node-0", &interrupt);
  transport::NcclRoute route;
  ASSERT_TRUE(membership.Join(SliceOf(0), absl::Now() + absl::Seconds(5), &route).ok());
  EXPECT_EQ(route.group, nullptr);
  EXPECT_TRUE(route.member_of.empty());
  const std::map<std::pair<int32_t, int32_t>, int32_t> expected = {
      {{1, 0}, 0}, {{1, 1}, 1}, {{2, 0}, 2}};
  EXPECT_EQ(route.rank_of, expected);
}

TEST(NcclMembershipTest, AMemberThatCannotJoinFailsTheJoinAndHoldsNoGroup) {
  if (transport::gpu::DetectGpu().available) {
    GTEST_SKIP() << "a GPU is here: joining needs the group's other members";
  }
  std::atomic<bool> interrupt{false};
  NcclMembership membership("node-1", &interrupt);
  transport::NcclRoute route;
  const absl::Status joined = membership.Join(SliceOf(1), absl::Now() + absl::Seconds(5), &route);
  EXPECT_FALSE(joined.ok());
  EXPECT_EQ(route.group, nullptr);
  // Its two GPUs are members 0 and 1 of this daemon, whatever happened.
  const std::map<int32_t, int> mine = {{0, 0}, {1, 1}};
  EXPECT_EQ(route.member_of, mine);
}

}  // namespace
}  // namespace refit::daemon

// The NCCL communicator's members: only when a GPU piece crosses daemons, one rank per
// (daemon, device) holding GPU buffers, in that order.
#include "transport/gpu/nccl_members.h"

#include "gtest/gtest.h"

namespace refit::transport::gpu {
namespace {

v1::RankPlacement Placed(v1::Role role, int64_t rank, int32_t daemon, int32_t device) {
  v1::RankPlacement p;
  p.set_role(role);
  p.set_rank(rank);
  p.set_daemon(daemon);
  p.set_gpu(device >= 0);
  p.set_device(device);
  return p;
}

// A plan of one transfer from source rank `src` to destination rank `dst`.
v1::Plan OneTransfer(int64_t src, int64_t dst) {
  v1::Plan plan;
  v1::Transfer* t = plan.add_batches()->add_transfers();
  t->mutable_src()->set_kind(v1::ENDPOINT_SOURCE_VIEW);
  t->mutable_src()->set_rank(src);
  t->mutable_dst()->set_kind(v1::ENDPOINT_DESTINATION_VIEW);
  t->mutable_dst()->set_rank(dst);
  return plan;
}

TEST(NcclMembersTest, GpuPiecesAcrossDaemonsMakeAGroup) {
  const std::vector<v1::RankPlacement> placement = {
      Placed(v1::ROLE_SOURCE, 0, 1, 3), Placed(v1::ROLE_SOURCE, 1, 1, 0),
      Placed(v1::ROLE_DESTINATION, 0, 0, 2), Placed(v1::ROLE_DESTINATION, 1, 0, 2)};
  std::optional<v1::NcclSetup> setup = NcclMembers(placement, OneTransfer(0, 1));
  ASSERT_TRUE(setup.has_value());
  // (daemon, device) in order, once each: (0,2), (1,0), (1,3).
  ASSERT_EQ(setup->members_size(), 3);
  EXPECT_EQ(setup->members(0).daemon(), 0);
  EXPECT_EQ(setup->members(0).device(), 2);
  EXPECT_EQ(setup->members(1).daemon(), 1);
  EXPECT_EQ(setup->members(1).device(), 0);
  EXPECT_EQ(setup->members(2).device(), 3);
}

TEST(NcclMembersTest, HostMemoryOrOneDaemonNeedsNoGroup) {
  // Host memory on one side: UCX carries it.
  EXPECT_FALSE(
      NcclMembers({Placed(v1::ROLE_SOURCE, 0, 0, -1), Placed(v1::ROLE_DESTINATION, 0, 1, 0)},
                  OneTransfer(0, 0))
          .has_value());
  // GPU to GPU on one daemon: CUDA IPC copies it.
  EXPECT_FALSE(
      NcclMembers({Placed(v1::ROLE_SOURCE, 0, 0, 1), Placed(v1::ROLE_DESTINATION, 0, 0, 0)},
                  OneTransfer(0, 0))
          .has_value());
  // GPU ranks on two daemons, but the piece goes into host scratch (gather_broadcast).
  v1::Plan to_scratch = OneTransfer(0, 0);
  to_scratch.mutable_batches(0)->mutable_transfers(0)->mutable_dst()->set_kind(
      v1::ENDPOINT_DESTINATION_SCRATCH);
  EXPECT_FALSE(
      NcclMembers({Placed(v1::ROLE_SOURCE, 0, 0, 1), Placed(v1::ROLE_DESTINATION, 0, 1, 0)},
                  to_scratch)
          .has_value());
}

}  // namespace
}  // namespace refit::transport::gpu

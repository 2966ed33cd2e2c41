#include "refitd/nccl_membership.h"

#include <utility>
#include <vector>

#include "spdlog/spdlog.h"

namespace refit::daemon {

absl::Status NcclMembership::Join(const v1::PlanSlice& slice, absl::Time deadline,
                                  transport::NcclRoute* route) {
  const v1::NcclSetup& setup = slice.nccl();
  route->ranks = transport::gpu::CommunicatorRanks::FromSetup(setup, slice.placement());
  route->gpus = route->ranks.OfDaemon(slice.daemon_index());
  std::vector<transport::gpu::NcclGroup::Member> mine;
  for (int32_t rank : route->gpus) {
    route->member_of[rank] = static_cast<int>(mine.size());
    mine.push_back({rank, route->ranks.DeviceOf(rank)});
  }
  if (mine.empty()) return absl::OkStatus();  // no GPU here takes part
  // Joined once per communicator; an aborted one (a failed epoch) is joined anew.
  if (group_ == nullptr || group_->aborted() || unique_id_ != setup.unique_id()) {
    group_.reset();
    absl::StatusOr<std::unique_ptr<transport::gpu::NcclGroup>> group =
        transport::gpu::NcclGroup::Join(setup.unique_id(), setup.members_size(), mine, deadline,
                                        interrupt_);
    if (!group.ok()) return group.status();
    group_ = std::move(*group);
    group_->SetInterrupt(interrupt_);
    unique_id_ = setup.unique_id();
    spdlog::info("refitd {}: joined the NCCL group with {} of its {} GPUs", node_, mine.size(),
                 setup.members_size());
  }
  route->group = group_.get();
  return absl::OkStatus();
}

}  // namespace refit::daemon

#include "daemon/nccl_membership.h"

#include <utility>
#include <vector>

#include "spdlog/spdlog.h"

namespace refit::daemon {

absl::Status NcclMembership::Join(const v1::PlanSlice& slice, absl::Time deadline,
                                  transport::NcclRoute* route) {
  const v1::NcclSetup& setup = slice.nccl();
  std::vector<transport::gpu::NcclGroup::Member> mine;
  for (int rank = 0; rank < setup.members_size(); ++rank) {
    const v1::NcclMember& member = setup.members(rank);
    route->rank_of[{member.daemon(), member.device()}] = rank;
    if (member.daemon() == slice.daemon_index()) {
      route->member_of[rank] = static_cast<int>(mine.size());
      mine.push_back({rank, member.device()});
    }
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

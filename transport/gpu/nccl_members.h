// Which GPUs form a refit group's NCCL communicator: when some piece of the plan goes from
// GPU memory on one daemon to GPU memory on another, one communicator rank per (daemon,
// device) that holds GPU buffers, in that order; otherwise none.
#ifndef REFIT_TRANSPORT_GPU_NCCL_MEMBERS_H_
#define REFIT_TRANSPORT_GPU_NCCL_MEMBERS_H_

#include <optional>
#include <vector>

#include "proto/refit.pb.h"

namespace refit::transport::gpu {

// The members (unique id left empty), or nullopt when no GPU piece crosses daemons.
std::optional<v1::NcclSetup> NcclMembers(const std::vector<v1::RankPlacement>& placement,
                                         const v1::Plan& plan);

}  // namespace refit::transport::gpu

#endif  // REFIT_TRANSPORT_GPU_NCCL_MEMBERS_H_

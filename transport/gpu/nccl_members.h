// Which GPUs form a refit group's NCCL communicator: when some piece of the plan goes from
// GPU memory on one daemon to GPU memory on another, one communicator rank per (daemon,
// device) that holds GPU buffers, in that order; otherwise none.
#ifndef REFIT_TRANSPORT_GPU_NCCL_MEMBERS_H_
#define REFIT_TRANSPORT_GPU_NCCL_MEMBERS_H_

#include <optional>
#include <vector>

#include "proto/refit.pb.h"

namespace refit::transport::gpu {

// Whether an endpoint of this kind lives in its rank's GPU memory when the rank is placed on
// a GPU: its views and relay buffers. Scratch (gather_broadcast's full tensors) is always
// host memory, so pieces to or from it never go over NCCL.
inline bool InGpuMemory(v1::EndpointKind kind) {
  return kind == v1::ENDPOINT_SOURCE_VIEW || kind == v1::ENDPOINT_DESTINATION_VIEW ||
         kind == v1::ENDPOINT_RELAY_BUFFER;
}

// The members (unique id left empty), or nullopt when no GPU piece crosses daemons.
std::optional<v1::NcclSetup> NcclMembers(const std::vector<v1::RankPlacement>& placement,
                                         const v1::Plan& plan);

}  // namespace refit::transport::gpu

#endif  // REFIT_TRANSPORT_GPU_NCCL_MEMBERS_H_

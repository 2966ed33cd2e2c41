// The build without a CUDA toolkit.
#include "transport/gpu/nccl_communicator.h"

namespace refit::transport::gpu {

struct NcclCommunicator::Handles {};

absl::StatusOr<std::string> NcclCommunicator::NewUniqueId() {
  return absl::UnimplementedError("refit was built without NCCL");
}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Join(const std::string&, int,
                                                                         int, int, absl::Time) {
  return absl::UnimplementedError("refit was built without NCCL");
}

NcclCommunicator::NcclCommunicator(std::unique_ptr<Handles> handles, int size, int rank, int device)
    : handles_(std::move(handles)), size_(size), rank_(rank), device_(device) {}
NcclCommunicator::~NcclCommunicator() = default;
void NcclCommunicator::Abort() { aborted_ = true; }

absl::Status NcclCommunicator::RunGroup(const std::vector<Message>&, absl::Time) {
  return absl::UnimplementedError("refit was built without NCCL");
}

}  // namespace refit::transport::gpu

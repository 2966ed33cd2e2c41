// The build without a CUDA toolkit.
#include "transport/gpu/nccl_group.h"

namespace refit::transport::gpu {
namespace {

absl::Status NoNccl() { return absl::UnimplementedError("refit was built without NCCL"); }

}  // namespace

struct NcclGroup::Handles {};

absl::StatusOr<std::string> NcclGroup::NewUniqueId() { return NoNccl(); }

absl::StatusOr<std::unique_ptr<NcclGroup>> NcclGroup::Join(const std::string&, int,
                                                           const std::vector<Member>&, absl::Time,
                                                           const Interrupt*) {
  return NoNccl();
}

NcclGroup::NcclGroup(std::unique_ptr<Handles> handles, int size)
    : handles_(std::move(handles)), size_(size) {}
NcclGroup::~NcclGroup() = default;
void NcclGroup::Abort() { aborted_ = true; }
absl::Status NcclGroup::RunStep(const std::vector<Message>&, absl::Time) { return NoNccl(); }

}  // namespace refit::transport::gpu

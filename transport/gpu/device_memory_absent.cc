// The build without a CUDA toolkit.
#include "transport/gpu/device_memory.h"

namespace refit::transport::gpu {

absl::StatusOr<std::unique_ptr<DeviceMemory>> DeviceMemory::Allocate(int64_t, int32_t) {
  return absl::UnimplementedError("refit was built without CUDA");
}

DeviceMemory::~DeviceMemory() = default;

}  // namespace refit::transport::gpu

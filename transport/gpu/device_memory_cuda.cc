#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"
#include "transport/gpu/cuda_checks.h"
#include "transport/gpu/device_memory.h"

namespace refit::transport::gpu {

absl::StatusOr<std::unique_ptr<DeviceMemory>> DeviceMemory::Allocate(int64_t bytes,
                                                                     int32_t device) {
  void* data = nullptr;
  absl::Status status = CudaStatus(cudaSetDevice(device), "cudaSetDevice");
  if (status.ok()) {
    status = CudaStatus(cudaMalloc(&data, bytes > 0 ? bytes : 1),
                        absl::StrCat("cudaMalloc of ", bytes, " bytes on device ", device));
  }
  if (!status.ok()) return absl::ResourceExhaustedError(status.message());
  return std::unique_ptr<DeviceMemory>(new DeviceMemory(static_cast<uint8_t*>(data), device));
}

DeviceMemory::~DeviceMemory() {
  cudaSetDevice(device_);
  cudaFree(data_);
}

}  // namespace refit::transport::gpu

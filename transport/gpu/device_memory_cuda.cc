#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"
#include "transport/gpu/device_memory.h"

namespace refit::transport::gpu {

absl::StatusOr<std::unique_ptr<DeviceMemory>> DeviceMemory::Allocate(int64_t bytes,
                                                                     int32_t device) {
  void* data = nullptr;
  cudaError_t status = cudaSetDevice(device);
  if (status == cudaSuccess) status = cudaMalloc(&data, bytes > 0 ? bytes : 1);
  if (status != cudaSuccess) {
    cudaGetLastError();
    return absl::ResourceExhaustedError(absl::StrCat("cudaMalloc of ", bytes, " bytes on device ",
                                                     device, ": ", cudaGetErrorString(status)));
  }
  return std::unique_ptr<DeviceMemory>(new DeviceMemory(static_cast<uint8_t*>(data), device));
}

DeviceMemory::~DeviceMemory() {
  cudaSetDevice(device_);
  cudaFree(data_);
}

}  // namespace refit::transport::gpu

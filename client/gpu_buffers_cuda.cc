#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"
#include "client/gpu_buffers.h"
#include "transport/gpu/cuda_checks.h"

namespace refit::client {

using transport::gpu::CudaStatus;

absl::StatusOr<v1::BufferSpec> CudaBufferRegistration(const std::string& name,
                                                      const void* device_pointer, int64_t bytes) {
  if (device_pointer == nullptr || bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("buffer \"", name, "\": needs a device pointer and a size"));
  }
  cudaIpcMemHandle_t handle;
  absl::Status got = CudaStatus(cudaIpcGetMemHandle(&handle, const_cast<void*>(device_pointer)),
                                absl::StrCat("buffer \"", name, "\": cudaIpcGetMemHandle"));
  if (!got.ok()) return got;
  v1::BufferSpec spec;
  spec.set_name(name);
  spec.set_bytes(bytes);
  spec.set_cuda_ipc_handle(reinterpret_cast<const char*>(&handle), sizeof(handle));
  return spec;
}

absl::StatusOr<std::unique_ptr<GpuBuffer>> GpuBuffer::Allocate(int64_t bytes, int32_t device) {
  absl::StatusOr<std::unique_ptr<transport::gpu::DeviceMemory>> memory =
      transport::gpu::DeviceMemory::Allocate(bytes, device);
  if (!memory.ok()) return memory.status();
  return std::unique_ptr<GpuBuffer>(new GpuBuffer(std::move(*memory), bytes));
}

absl::Status GpuBuffer::CopyFromHost(const void* host) {
  return CudaStatus(cudaMemcpy(data(), host, bytes_, cudaMemcpyHostToDevice), "cudaMemcpy to GPU");
}

absl::Status GpuBuffer::CopyToHost(void* host) const {
  return CudaStatus(cudaMemcpy(host, data(), bytes_, cudaMemcpyDeviceToHost), "cudaMemcpy to host");
}

}  // namespace refit::client

// GPU memory for ranks that register it with refitd by CUDA IPC handle: a helper that
// turns a device pointer and size into the registration, and a small owned allocation
// (what the synthetic ranks and the GPU checks use). Without CUDA in the build, every
// call is a clear UNIMPLEMENTED error.
#ifndef REFIT_CLIENT_GPU_BUFFERS_H_
#define REFIT_CLIENT_GPU_BUFFERS_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "proto/refit.pb.h"
#include "transport/gpu/device_memory.h"

namespace refit::client {

// The registration (refit.v1.BufferSpec) of `bytes` of GPU memory at `device_pointer`,
// which must be the start of a cudaMalloc allocation (CUDA IPC shares whole allocations;
// views inside it are placed with byte_offset). The caller keeps the memory alive while
// the rank is registered.
absl::StatusOr<v1::BufferSpec> CudaBufferRegistration(const std::string& name,
                                                      const void* device_pointer, int64_t bytes);

// GPU memory a rank owns and registers (the synthetic ranks and the GPU checks use it).
class GpuBuffer {
 public:
  static absl::StatusOr<std::unique_ptr<GpuBuffer>> Allocate(int64_t bytes, int32_t device);

  void* data() const { return memory_->data(); }
  int64_t bytes() const { return bytes_; }
  absl::StatusOr<v1::BufferSpec> Registration(const std::string& name) const {
    return CudaBufferRegistration(name, data(), bytes_);
  }
  absl::Status CopyFromHost(const void* host);  // bytes() bytes
  absl::Status CopyToHost(void* host) const;

 private:
  GpuBuffer(std::unique_ptr<transport::gpu::DeviceMemory> memory, int64_t bytes)
      : memory_(std::move(memory)), bytes_(bytes) {}
  std::unique_ptr<transport::gpu::DeviceMemory> memory_;
  int64_t bytes_;
};

}  // namespace refit::client

#endif  // REFIT_CLIENT_GPU_BUFFERS_H_

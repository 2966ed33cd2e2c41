// The build without a CUDA toolkit.
#include "client/gpu_buffers.h"

namespace refit::client {
namespace {

absl::Status NoCuda() { return absl::UnimplementedError("refit was built without CUDA"); }

}  // namespace

absl::StatusOr<v1::BufferSpec> CudaBufferRegistration(const std::string&, const void*, int64_t) {
  return NoCuda();
}

absl::StatusOr<std::unique_ptr<GpuBuffer>> GpuBuffer::Allocate(int64_t, int32_t) {
  return NoCuda();
}

absl::Status GpuBuffer::CopyFromHost(const void*) { return NoCuda(); }
absl::Status GpuBuffer::CopyToHost(void*) const { return NoCuda(); }

}  // namespace refit::client

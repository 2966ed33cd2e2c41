#include <cuda_runtime_api.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "transport/gpu/cuda_ipc_buffer.h"

namespace refit::transport::gpu {
namespace {

static_assert(sizeof(cudaIpcMemHandle_t) == kCudaIpcHandleBytes);

class CudaIpcBuffer final : public MappedBuffer {
 public:
  CudaIpcBuffer(uint8_t* data, int64_t bytes, int32_t device)
      : data_(data), bytes_(bytes), device_(device) {}
  ~CudaIpcBuffer() override {
    cudaSetDevice(device_);
    cudaIpcCloseMemHandle(data_);
  }
  uint8_t* data() const override { return data_; }
  int64_t bytes() const override { return bytes_; }
  int32_t device() const override { return device_; }

 private:
  uint8_t* data_;
  int64_t bytes_;
  int32_t device_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<MappedBuffer>> OpenCudaIpcBuffer(const std::string& handle,
                                                                int64_t bytes, int32_t device) {
  if (handle.size() != sizeof(cudaIpcMemHandle_t)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a CUDA IPC handle has ", sizeof(cudaIpcMemHandle_t), " bytes, not ", handle.size()));
  }
  if (bytes <= 0) return absl::InvalidArgumentError("a GPU buffer needs its size in bytes");
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || device < 0 || device >= count) {
    cudaGetLastError();
    return absl::FailedPreconditionError(
        absl::StrCat("CUDA device ", device, " is not available to refitd (", count, " devices)"));
  }
  cudaIpcMemHandle_t ipc;
  std::memcpy(&ipc, handle.data(), sizeof(ipc));
  if (cudaError_t status = cudaSetDevice(device); status != cudaSuccess) {
    return absl::InternalError(
        absl::StrCat("cudaSetDevice(", device, "): ", cudaGetErrorString(status)));
  }
  void* pointer = nullptr;
  if (cudaError_t status = cudaIpcOpenMemHandle(&pointer, ipc, cudaIpcMemLazyEnablePeerAccess);
      status != cudaSuccess) {
    cudaGetLastError();
    return absl::InvalidArgumentError(
        absl::StrCat("cudaIpcOpenMemHandle on device ", device, ": ", cudaGetErrorString(status)));
  }
  return std::unique_ptr<MappedBuffer>(
      new CudaIpcBuffer(static_cast<uint8_t*>(pointer), bytes, device));
}

}  // namespace refit::transport::gpu

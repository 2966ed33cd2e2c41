#include <cuda_runtime_api.h>

#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "transport/gpu/cuda_checks.h"
#include "transport/gpu/cuda_ipc_buffer.h"

namespace refit::transport::gpu {
namespace {

static_assert(sizeof(cudaIpcMemHandle_t) == kCudaIpcHandleBytes);

// One opened CUDA IPC handle: CUDA maps a handle once per process (a second
// cudaIpcOpenMemHandle of it fails), while one caching-allocator block may hold the
// tensors of several ranks a process registers in place. Closed with its last user.
class OpenedHandle;

// The handles this process has open, by device and handle bytes.
absl::Mutex opened_mu;
absl::flat_hash_map<std::string, std::weak_ptr<OpenedHandle>>& OpenedHandles()
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(opened_mu) {
  static auto* opened = new absl::flat_hash_map<std::string, std::weak_ptr<OpenedHandle>>();
  return *opened;
}

class OpenedHandle {
 public:
  OpenedHandle(std::string key, uint8_t* data, int32_t device)
      : key_(std::move(key)), data_(data), device_(device) {}
  // Closed under the lock, so that the handle is not opened again before it is closed.
  ~OpenedHandle() {
    absl::MutexLock lock(&opened_mu);
    cudaSetDevice(device_);
    cudaIpcCloseMemHandle(data_);
    auto it = OpenedHandles().find(key_);
    if (it != OpenedHandles().end() && it->second.expired()) OpenedHandles().erase(it);
  }
  uint8_t* data() const { return data_; }

 private:
  const std::string key_;
  uint8_t* data_;
  int32_t device_;
};

class CudaIpcBuffer final : public MappedBuffer {
 public:
  CudaIpcBuffer(std::shared_ptr<OpenedHandle> opened, int64_t bytes, int32_t device)
      : opened_(std::move(opened)), bytes_(bytes), device_(device) {}
  uint8_t* data() const override { return opened_->data(); }
  int64_t bytes() const override { return bytes_; }
  int32_t device() const override { return device_; }

 private:
  std::shared_ptr<OpenedHandle> opened_;
  int64_t bytes_;  // what this registration declared of the allocation
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
  if (absl::Status set =
          CudaStatus(cudaSetDevice(device), absl::StrCat("cudaSetDevice(", device, ")"));
      !set.ok()) {
    return set;
  }
  const std::string key = absl::StrCat(device, "/", handle);
  absl::MutexLock lock(&opened_mu);
  std::shared_ptr<OpenedHandle> opened = OpenedHandles()[key].lock();
  if (opened == nullptr) {
    void* pointer = nullptr;
    if (absl::Status open =
            CudaStatus(cudaIpcOpenMemHandle(&pointer, ipc, cudaIpcMemLazyEnablePeerAccess),
                       absl::StrCat("cudaIpcOpenMemHandle on device ", device));
        !open.ok()) {
      return absl::InvalidArgumentError(open.message());
    }
    opened = std::make_shared<OpenedHandle>(key, static_cast<uint8_t*>(pointer), device);
    OpenedHandles()[key] = opened;
  }
  return std::unique_ptr<MappedBuffer>(new CudaIpcBuffer(std::move(opened), bytes, device));
}

}  // namespace refit::transport::gpu

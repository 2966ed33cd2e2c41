// The build without a CUDA toolkit.
#include "transport/gpu/cuda_ipc_buffer.h"

namespace refit::transport::gpu {

absl::StatusOr<std::unique_ptr<MappedBuffer>> OpenCudaIpcBuffer(const std::string&, int64_t,
                                                                int32_t) {
  return absl::UnimplementedError(
      "the buffer is GPU memory (a CUDA IPC handle) but this refitd was built without CUDA");
}

}  // namespace refit::transport::gpu

// GPU buffers that ranks register by CUDA IPC memory handle. refitd opens each handle once
// (cudaIpcOpenMemHandle) when the rank registers, keeps it open across epochs and closes
// it when the rank leaves. Without CUDA in the build, registering one is a clear error.
#ifndef REFIT_TRANSPORT_GPU_CUDA_IPC_BUFFER_H_
#define REFIT_TRANSPORT_GPU_CUDA_IPC_BUFFER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "transport/mapped_buffer.h"

namespace refit::transport::gpu {

// Size of a cudaIpcMemHandle_t.
inline constexpr size_t kCudaIpcHandleBytes = 64;

// Opens `handle` (the bytes of a cudaIpcMemHandle_t for the start of an allocation of at
// least `bytes`) on CUDA device `device`.
absl::StatusOr<std::unique_ptr<MappedBuffer>> OpenCudaIpcBuffer(const std::string& handle,
                                                                int64_t bytes, int32_t device);

}  // namespace refit::transport::gpu

#endif  // REFIT_TRANSPORT_GPU_CUDA_IPC_BUFFER_H_

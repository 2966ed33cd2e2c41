// The build without a CUDA toolkit: only host memory exists.
#include "transport/gpu/device_copy.h"
#include "transport/memory_fault_guard.h"

namespace refit::transport::gpu {

absl::Status DeviceCopyChain::Copy(const Dims& extent, int element_bytes,
                                   const ConstStridedRef& src, const StridedRef& dst,
                                   uint64_t* source_hash, uint64_t* destination_hash) {
  if (src.device >= 0 || dst.device >= 0) {
    return absl::UnimplementedError("a copy touches GPU memory but refit was built without CUDA");
  }
  return GuardMemoryAccess("a copy between host buffers", [&] {
    CopyBox(extent, element_bytes, src, dst, source_hash, destination_hash);
  });
}

absl::Status DeviceCopyChain::Wait() { return absl::OkStatus(); }

absl::Status CopyAnyBox(const Dims& extent, int element_bytes, const ConstStridedRef& src,
                        const StridedRef& dst) {
  DeviceCopyChain chain;
  return chain.Copy(extent, element_bytes, src, dst);
}

}  // namespace refit::transport::gpu

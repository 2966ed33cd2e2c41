// The build without a CUDA toolkit.
#include "transport/gpu/gpu_support.h"

namespace refit::transport::gpu {

GpuSupport DetectGpu() {
  GpuSupport support;
  support.description = "built without CUDA (no GPU backends)";
  return support;
}

}  // namespace refit::transport::gpu

// Box copies where either side may be GPU memory: host to host goes through CopyBox; any
// GPU side goes to the copy engines as the few cudaMemcpy/2D/3D calls PlanCopyCalls picks
// (same device, peer devices, or host and device), on a per-thread stream per device, and
// waits for them. Without CUDA in the build a GPU side is an error.
#ifndef REFIT_TRANSPORT_GPU_DEVICE_COPY_H_
#define REFIT_TRANSPORT_GPU_DEVICE_COPY_H_

#include "absl/status/status.h"
#include "transport/strided_copy.h"

namespace refit::transport::gpu {

absl::Status CopyAnyBox(const Dims& extent, int element_bytes, const StridedRef& src,
                        const StridedRef& dst);

}  // namespace refit::transport::gpu

#endif  // REFIT_TRANSPORT_GPU_DEVICE_COPY_H_

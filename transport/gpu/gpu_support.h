// Whether this build has the GPU backends and whether this machine can run them. refitd
// prints it at start, serves it on /readyz and sends it to the coordinator for Status.
#ifndef REFIT_TRANSPORT_GPU_GPU_SUPPORT_H_
#define REFIT_TRANSPORT_GPU_GPU_SUPPORT_H_

#include <string>

namespace refit::transport::gpu {

struct GpuSupport {
  bool built = false;      // compiled with CUDA and NCCL
  bool available = false;  // a driver and at least one GPU answered
  int devices = 0;
  // One line: "2 GPUs (NVIDIA H200, ...), CUDA driver 13.0, runtime 13.0, NCCL 2.28.3",
  // "no GPU: CUDA driver version is insufficient ..." or "built without CUDA".
  std::string description;
};

// Asks the CUDA runtime (once per call; cheap).
GpuSupport DetectGpu();

}  // namespace refit::transport::gpu

#endif  // REFIT_TRANSPORT_GPU_GPU_SUPPORT_H_

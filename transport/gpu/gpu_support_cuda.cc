// The build with CUDA and NCCL: asks the runtime what this machine has.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "transport/gpu/gpu_support.h"

namespace refit::transport::gpu {
namespace {

std::string CudaVersion(int version) {
  return absl::StrCat(version / 1000, ".", (version % 1000) / 10);
}

}  // namespace

GpuSupport DetectGpu() {
  GpuSupport support;
  support.built = true;
  int runtime = 0, driver = 0, nccl = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);  // 0 when no driver is installed
  const std::string nccl_version =
      ncclGetVersion(&nccl) == ncclSuccess
          ? absl::StrCat(nccl / 10000, ".", (nccl % 10000) / 100, ".", nccl % 100)
          : "unknown";
  const std::string versions =
      absl::StrCat("CUDA runtime ", CudaVersion(runtime), ", driver ",
                   driver > 0 ? CudaVersion(driver) : "none", ", NCCL ", nccl_version);
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0) {
    support.description =
        absl::StrCat("no GPU: ", status != cudaSuccess ? cudaGetErrorString(status) : "0 devices",
                     " (", versions, ")");
    cudaGetLastError();  // clear the sticky error for later callers
    return support;
  }
  std::vector<std::string> names;
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp properties;
    if (cudaGetDeviceProperties(&properties, d) == cudaSuccess) names.push_back(properties.name);
  }
  support.available = true;
  support.devices = count;
  support.description = absl::StrCat(count, count == 1 ? " GPU (" : " GPUs (",
                                     absl::StrJoin(names, ", "), "), ", versions);
  return support;
}

}  // namespace refit::transport::gpu

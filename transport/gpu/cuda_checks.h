// The one place a CUDA runtime result becomes an absl::Status: the call is named, CUDA's
// error string kept, and the error cleared (cudaGetLastError) so that the next check does
// not report it again. Only in builds with the CUDA toolkit.
#ifndef REFIT_TRANSPORT_GPU_CUDA_CHECKS_H_
#define REFIT_TRANSPORT_GPU_CUDA_CHECKS_H_

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace refit::transport::gpu {

inline absl::Status CudaStatus(cudaError_t status, absl::string_view call) {
  if (status == cudaSuccess) return absl::OkStatus();
  cudaGetLastError();
  return absl::InternalError(absl::StrCat(call, ": ", cudaGetErrorString(status)));
}

}  // namespace refit::transport::gpu

#endif  // REFIT_TRANSPORT_GPU_CUDA_CHECKS_H_

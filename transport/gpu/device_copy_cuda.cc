#include <cuda_runtime_api.h>
#include <driver_functions.h>

#include <map>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "transport/gpu/copy_shape.h"
#include "transport/gpu/device_copy.h"
#include "transport/memory_fault_guard.h"

namespace refit::transport::gpu {
namespace {

absl::Status CudaStatus(cudaError_t status, const char* call) {
  if (status == cudaSuccess) return absl::OkStatus();
  cudaGetLastError();
  return absl::InternalError(absl::StrCat(call, ": ", cudaGetErrorString(status)));
}

// One non-blocking stream per device for this thread, destroyed with the thread.
class ThreadStreams {
 public:
  ~ThreadStreams() {
    for (auto& [device, stream] : streams_) {
      cudaSetDevice(device);
      cudaStreamDestroy(stream);
    }
  }
  absl::StatusOr<cudaStream_t> On(int32_t device) {
    auto it = streams_.find(device);
    if (it != streams_.end()) return it->second;
    cudaStream_t stream;
    absl::Status created = CudaStatus(cudaSetDevice(device), "cudaSetDevice");
    if (created.ok()) {
      created = CudaStatus(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                           "cudaStreamCreateWithFlags");
    }
    if (!created.ok()) return created;
    streams_[device] = stream;
    return stream;
  }

 private:
  std::map<int32_t, cudaStream_t> streams_;
};

thread_local ThreadStreams thread_streams;

cudaMemcpyKind KindOf(const StridedRef& src, const StridedRef& dst) {
  return static_cast<cudaMemcpyKind>(MemcpyKindOf(src.device >= 0, dst.device >= 0));
}

}  // namespace

absl::Status CopyAnyBox(const Dims& extent, int element_bytes, const StridedRef& src,
                        const StridedRef& dst) {
  if (src.device < 0 && dst.device < 0) {
    return GuardMemoryAccess("a copy between host buffers",
                             [&] { CopyBox(extent, element_bytes, src, dst); });
  }
  // The copy runs on a stream of the device it writes to (else the one it reads from).
  const int32_t device = dst.device >= 0 ? dst.device : src.device;
  absl::StatusOr<cudaStream_t> stream = thread_streams.On(device);
  if (!stream.ok()) return stream.status();
  const cudaMemcpyKind kind = KindOf(src, dst);
  for (const CopyCall& call : PlanCopyCalls(extent, element_bytes, src.strides, dst.strides)) {
    uint8_t* from = src.base + call.src_offset;
    uint8_t* to = dst.base + call.dst_offset;
    cudaError_t status = cudaSuccess;
    switch (call.kind) {
      case CopyCallKind::k1D:
        status = cudaMemcpyAsync(to, from, call.width, kind, *stream);
        break;
      case CopyCallKind::k2D:
        status = cudaMemcpy2DAsync(to, call.dst_pitch, from, call.src_pitch, call.width,
                                   call.height, kind, *stream);
        break;
      case CopyCallKind::k3D: {
        cudaMemcpy3DParms parameters = {};
        parameters.srcPtr =
            make_cudaPitchedPtr(from, call.src_pitch, call.src_pitch, call.src_rows);
        parameters.dstPtr = make_cudaPitchedPtr(to, call.dst_pitch, call.dst_pitch, call.dst_rows);
        parameters.extent = make_cudaExtent(call.width, call.height, call.depth);
        parameters.kind = kind;
        status = cudaMemcpy3DAsync(&parameters, *stream);
        break;
      }
    }
    if (absl::Status issued = CudaStatus(status, "cudaMemcpy*Async"); !issued.ok()) {
      cudaStreamSynchronize(*stream);
      return issued;
    }
  }
  return CudaStatus(cudaStreamSynchronize(*stream), "cudaStreamSynchronize");
}

}  // namespace refit::transport::gpu

#include <cuda_runtime_api.h>
#include <driver_functions.h>

#include <map>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "transport/gpu/copy_shape.h"
#include "transport/gpu/cuda_checks.h"
#include "transport/gpu/device_copy.h"
#include "transport/memory_fault_guard.h"

namespace refit::transport::gpu {
namespace {

// One non-blocking stream per device for this thread, with an event that marks the last
// copy issued on it (what a copy on another device's stream waits for), destroyed with
// the thread.
class ThreadStreams {
 public:
  struct Stream {
    cudaStream_t stream = nullptr;
    cudaEvent_t last = nullptr;
  };
  ~ThreadStreams() {
    for (auto& [device, s] : streams_) {
      cudaSetDevice(device);
      cudaEventDestroy(s.last);
      cudaStreamDestroy(s.stream);
    }
  }
  absl::StatusOr<Stream> On(int32_t device) {
    auto it = streams_.find(device);
    if (it != streams_.end()) return it->second;
    Stream s;
    absl::Status created = CudaStatus(cudaSetDevice(device), "cudaSetDevice");
    if (created.ok()) {
      created = CudaStatus(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking),
                           "cudaStreamCreateWithFlags");
    }
    if (created.ok()) {
      created = CudaStatus(cudaEventCreateWithFlags(&s.last, cudaEventDisableTiming),
                           "cudaEventCreateWithFlags");
      if (!created.ok()) cudaStreamDestroy(s.stream);
    }
    if (!created.ok()) return created;
    streams_[device] = s;
    return s;
  }

 private:
  std::map<int32_t, Stream> streams_;
};

thread_local ThreadStreams thread_streams;

cudaMemcpyKind KindOf(const ConstStridedRef& src, const StridedRef& dst) {
  return static_cast<cudaMemcpyKind>(MemcpyKindOf(src.device >= 0, dst.device >= 0));
}

}  // namespace

absl::Status DeviceCopyChain::Copy(const Dims& extent, int element_bytes,
                                   const ConstStridedRef& src, const StridedRef& dst,
                                   uint64_t* source_hash, uint64_t* destination_hash) {
  if (src.device < 0 && dst.device < 0) {
    // It may read what a pending GPU copy writes.
    if (absl::Status waited = Wait(); !waited.ok()) return waited;
    return GuardMemoryAccess("a copy between host buffers", [&] {
      CopyBox(extent, element_bytes, src, dst, source_hash, destination_hash);
    });
  }
  // The copy runs on a stream of the device it writes to (else the one it reads from).
  const int32_t device = dst.device >= 0 ? dst.device : src.device;
  absl::StatusOr<ThreadStreams::Stream> stream = thread_streams.On(device);
  if (!stream.ok()) return stream.status();
  if (last_device_ >= 0 && last_device_ != device) {
    // In order with the copy before it, which ran on another device's stream.
    absl::StatusOr<ThreadStreams::Stream> before = thread_streams.On(last_device_);
    if (!before.ok()) return before.status();
    absl::Status ordered =
        CudaStatus(cudaEventRecord(before->last, before->stream), "cudaEventRecord");
    if (ordered.ok()) {
      ordered =
          CudaStatus(cudaStreamWaitEvent(stream->stream, before->last, 0), "cudaStreamWaitEvent");
    }
    if (!ordered.ok()) {
      Wait().IgnoreError();
      return ordered;
    }
  }
  last_device_ = device;
  pending_devices_.insert(device);
  const cudaMemcpyKind kind = KindOf(src, dst);
  for (const CopyCall& call : PlanCopyCalls(extent, element_bytes, src.strides, dst.strides)) {
    const uint8_t* from = src.base + call.src_offset;
    uint8_t* to = dst.base + call.dst_offset;
    cudaError_t status = cudaSuccess;
    switch (call.kind) {
      case CopyCallKind::k1D:
        status = cudaMemcpyAsync(to, from, call.width, kind, stream->stream);
        break;
      case CopyCallKind::k2D:
        status = cudaMemcpy2DAsync(to, call.dst_pitch, from, call.src_pitch, call.width,
                                   call.height, kind, stream->stream);
        break;
      case CopyCallKind::k3D: {
        cudaMemcpy3DParms parameters = {};
        // cudaPitchedPtr has no const form; CUDA only reads the source.
        parameters.srcPtr = make_cudaPitchedPtr(const_cast<uint8_t*>(from), call.src_pitch,
                                                call.src_pitch, call.src_rows);
        parameters.dstPtr = make_cudaPitchedPtr(to, call.dst_pitch, call.dst_pitch, call.dst_rows);
        parameters.extent = make_cudaExtent(call.width, call.height, call.depth);
        parameters.kind = kind;
        status = cudaMemcpy3DAsync(&parameters, stream->stream);
        break;
      }
    }
    if (absl::Status issued = CudaStatus(status, "cudaMemcpy*Async"); !issued.ok()) {
      Wait().IgnoreError();
      return issued;
    }
  }
  return absl::OkStatus();
}

absl::Status DeviceCopyChain::Wait() {
  absl::Status first = absl::OkStatus();
  for (int32_t device : pending_devices_) {
    absl::StatusOr<ThreadStreams::Stream> stream = thread_streams.On(device);
    absl::Status waited =
        stream.ok() ? CudaStatus(cudaStreamSynchronize(stream->stream), "cudaStreamSynchronize")
                    : stream.status();
    if (first.ok()) first = waited;
  }
  pending_devices_.clear();
  last_device_ = -1;
  return first;
}

absl::Status CopyAnyBox(const Dims& extent, int element_bytes, const ConstStridedRef& src,
                        const StridedRef& dst) {
  DeviceCopyChain chain;
  absl::Status issued = chain.Copy(extent, element_bytes, src, dst);
  absl::Status waited = chain.Wait();
  return issued.ok() ? waited : issued;
}

}  // namespace refit::transport::gpu

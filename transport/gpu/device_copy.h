// Box copies where either side may be GPU memory: host to host goes through CopyBox; any
// GPU side goes to the copy engines as the few cudaMemcpy/2D/3D calls PlanCopyCalls picks
// (same device, peer devices, or host and device), on a per-thread stream per device.
// CopyAnyBox waits for its copy; a DeviceCopyChain issues many and waits once, so a batch
// of small pieces costs one synchronization instead of one per piece. Without CUDA in the
// build a GPU side is an error.
#ifndef REFIT_TRANSPORT_GPU_DEVICE_COPY_H_
#define REFIT_TRANSPORT_GPU_DEVICE_COPY_H_

#include <set>

#include "absl/status/status.h"
#include "transport/strided_copy.h"

namespace refit::transport::gpu {

// Copies that run in the order they were issued, whichever devices they touch (a copy on
// another device's stream first waits for the one before it), and that the host waits for
// together in Wait(). A host-to-host copy waits for the GPU copies before it, since it may
// read what they write. Memory named in a pending copy must stay valid, and unread by the
// host, until Wait() returns; the destructor waits too. One thread's object.
class DeviceCopyChain {
 public:
  DeviceCopyChain() = default;
  DeviceCopyChain(const DeviceCopyChain&) = delete;
  DeviceCopyChain& operator=(const DeviceCopyChain&) = delete;
  ~DeviceCopyChain() { Wait().IgnoreError(); }

  // A host-to-host copy runs at once and, given `source_hash` or `destination_hash`, sets
  // them to HashBox of its sides (CopyBox hashing on the way); a copy touching GPU memory
  // leaves them as they were.
  absl::Status Copy(const Dims& extent, int element_bytes, const ConstStridedRef& src,
                    const StridedRef& dst, uint64_t* source_hash = nullptr,
                    uint64_t* destination_hash = nullptr);
  // Waits for every copy issued since the last Wait; the first failure among them.
  absl::Status Wait();

 private:
  int32_t last_device_ = -1;           // the device whose stream took the last copy
  std::set<int32_t> pending_devices_;  // devices with copies not yet waited for
};

// One copy, waited for.
absl::Status CopyAnyBox(const Dims& extent, int element_bytes, const ConstStridedRef& src,
                        const StridedRef& dst);

}  // namespace refit::transport::gpu

#endif  // REFIT_TRANSPORT_GPU_DEVICE_COPY_H_

// Relay buffers of the ranks one refitd serves, for one plan run: dense buffers on a
// source rank's GPU (or in host memory) that hold one global box of a tensor, filled by a
// transfer from another NVLink domain and read by later batches that forward it to the
// destinations of that domain. Each is allocated when first touched and freed after the
// last read this daemon's part of the plan makes of it, so a GPU holds only the pieces it
// is relaying at the time (the planner reports that peak).
#ifndef REFIT_TRANSPORT_RELAY_BUFFERS_H_
#define REFIT_TRANSPORT_RELAY_BUFFERS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "proto/refit.pb.h"
#include "transport/buffer_map.h"
#include "transport/staging_pool.h"
#include "transport/strided_copy.h"

namespace refit::transport {

class RelayBuffers {
 public:
  // `allocate` gives memory on a CUDA device, or on the host for device -1.
  RelayBuffers(const TensorTable& tensors, StagingPool::Allocator allocate)
      : tensors_(tensors), allocate_(std::move(allocate)) {}

  // Counts one read of the buffer `endpoint` names that this run will make (call for
  // every such transfer before the run starts).
  void ExpectRead(const v1::Endpoint& endpoint) { ++buffers_[KeyOf(endpoint)].reads_left; }

  // Memory of the box (offset, extent) of `tensor` inside the buffer `endpoint` names, on
  // `device` (-1: host); allocated on first use. Errors name the tensor and the buffer
  // when the box or the buffer's own box does not fit.
  absl::StatusOr<StridedRef> Locate(const v1::Endpoint& endpoint, const std::string& tensor,
                                    const Dims& offset, const Dims& extent, int32_t device);

  // One expected read has run; the buffer is freed after its last one.
  void ReadDone(const v1::Endpoint& endpoint);

  int64_t live_bytes() const { return live_bytes_; }
  int64_t peak_bytes() const { return peak_bytes_; }
  int64_t live_buffers() const { return live_buffers_; }

 private:
  using Key = std::pair<int64_t, int64_t>;  // (source rank, buffer id)
  struct Buffer {
    std::shared_ptr<uint8_t> memory;
    std::string tensor;
    Dims offset, extent;
    int32_t device = -1;
    int64_t bytes = 0;
    int64_t reads_left = 0;
  };
  static Key KeyOf(const v1::Endpoint& e) { return {e.rank(), e.relay_buffer()}; }

  const TensorTable& tensors_;
  StagingPool::Allocator allocate_;
  std::map<Key, Buffer> buffers_;
  int64_t live_bytes_ = 0;
  int64_t peak_bytes_ = 0;
  int64_t live_buffers_ = 0;  // allocated and not yet freed
};

// Host memory for relay buffers (not zeroed: every byte is written before it is read),
// and device memory through `device_allocate` for device >= 0.
StagingPool::Allocator RelayBufferAllocator(StagingPool::Allocator device_allocate);

}  // namespace refit::transport

#endif  // REFIT_TRANSPORT_RELAY_BUFFERS_H_

// Relay buffers of the ranks one refitd serves, for one plan run: dense buffers on a
// source rank's GPU (or in host memory) that hold one global box of a tensor, filled by a
// transfer from another NVLink domain and read by later batches that forward it to the
// destinations of that domain. Before the run every buffer this daemon will use gets its
// place in one block per device, by first fit over the batches: a buffer holds its place
// from the batch of its fill to the batch of its last read here, and later buffers reuse
// it. So a device's block is about the most bytes it relays at once (the planner reports
// that peak per GPU), and device memory is allocated once per run, not once per buffer
// (cudaMalloc and cudaFree synchronize the GPU).
#ifndef REFIT_TRANSPORT_RELAY_BUFFERS_H_
#define REFIT_TRANSPORT_RELAY_BUFFERS_H_

#include <cstdint>
#include <functional>
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

  // Lays out every relay buffer of `plan` that this daemon holds (`is_local`, by source
  // rank; `device_of` that rank's device) and allocates each device's block. Errors name
  // the buffer (unknown tensor) or the device (allocation).
  absl::Status Prepare(const v1::Plan& plan, const std::function<bool(int64_t)>& is_local,
                       const std::function<int32_t(int64_t)>& device_of);

  // Memory of the box (offset, extent) of `tensor` inside the buffer `endpoint` names, on
  // `device` (-1: host). Errors name the tensor and the buffer when it was not prepared,
  // or the box or the buffer's own box does not fit.
  absl::StatusOr<StridedRef> Locate(const v1::Endpoint& endpoint, const std::string& tensor,
                                    const Dims& offset, const Dims& extent, int32_t device);

  // One read of the buffer has run; after its last one its place is free (no longer live).
  void ReadDone(const v1::Endpoint& endpoint);

  int64_t live_bytes() const { return live_bytes_; }
  int64_t peak_bytes() const { return peak_bytes_; }
  int64_t live_buffers() const { return live_buffers_; }
  // Bytes of the blocks Prepare allocated, summed over devices.
  int64_t block_bytes() const { return block_bytes_; }

 private:
  using Key = std::pair<int64_t, int64_t>;  // (source rank, buffer id)
  struct Buffer {
    std::string tensor;
    Dims offset, extent;  // the box it holds
    int32_t device = -1;
    int64_t bytes = 0;
    int64_t place = 0;  // byte offset in its device's block
    int32_t first_batch = 0;
    int32_t last_batch = 0;
    int64_t reads_left = 0;
    bool filled = false;
  };
  static Key KeyOf(const v1::Endpoint& e) { return {e.rank(), e.relay_buffer()}; }
  std::string NameOf(const v1::Endpoint& endpoint, const std::string& tensor) const;
  // Gives every buffer its place: first fit, per device, batch by batch. Returns each
  // device's block size.
  std::map<int32_t, int64_t> LayOut(int32_t num_batches);

  const TensorTable& tensors_;
  StagingPool::Allocator allocate_;
  std::map<Key, Buffer> buffers_;
  std::map<int32_t, std::shared_ptr<uint8_t>> blocks_;  // by device
  int64_t block_bytes_ = 0;
  int64_t live_bytes_ = 0;
  int64_t peak_bytes_ = 0;
  int64_t live_buffers_ = 0;  // filled and not yet read for the last time
};

// Host memory for relay-buffer blocks (not zeroed: every byte is written before it is
// read), and device memory through `device_allocate` for device >= 0.
StagingPool::Allocator RelayBufferAllocator(StagingPool::Allocator device_allocate);

}  // namespace refit::transport

#endif  // REFIT_TRANSPORT_RELAY_BUFFERS_H_

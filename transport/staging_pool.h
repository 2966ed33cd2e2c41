// Staging memory for packed messages, kept across batches and epochs: one block per device
// (-1: host), grown to the largest batch seen and carved into that batch's messages.
// Allocating device memory synchronizes the GPU (cudaMalloc/cudaFree), and fresh host
// memory pays a page fault per page on first touch (about half of an epoch on the host
// path when each batch allocated its staging), so the data plane must not allocate per
// message and batch; with the pool it allocates only when a batch needs more than any
// batch before it, and the planner's staging budget bounds that.
#ifndef REFIT_TRANSPORT_STAGING_POOL_H_
#define REFIT_TRANSPORT_STAGING_POOL_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"

namespace refit::transport {

class StagingPool {
 public:
  // Returns at least `bytes` bytes on `device`, freed when the last copy of the pointer goes.
  using Allocator =
      std::function<absl::StatusOr<std::shared_ptr<uint8_t>>(int64_t bytes, int32_t device)>;
  // Each message starts at a multiple of this (copy engines and NCCL like aligned buffers).
  static constexpr int64_t kAlignment = 256;
  // `bytes` rounded up to a multiple of kAlignment.
  static int64_t AlignUp(int64_t bytes) {
    return (bytes + kAlignment - 1) / kAlignment * kAlignment;
  }
  // The bytes a Carve of messages of `sizes` (none negative) takes: each aligned up.
  static int64_t CarvedBytes(const std::vector<int64_t>& sizes) {
    int64_t total = 0;
    for (int64_t size : sizes) total += AlignUp(size);
    return total;
  }

  explicit StagingPool(Allocator allocate) : allocate_(std::move(allocate)) {}

  // Memory on `device` for messages of `sizes` bytes, one pointer per message, aligned and
  // not overlapping. Valid until the next Carve for the same device.
  absl::StatusOr<std::vector<uint8_t*>> Carve(int32_t device, const std::vector<int64_t>& sizes);

  // The block the last Carve for `device` carved (null when none): a receive that may
  // still be written after its batch failed keeps it alive through this reference.
  std::shared_ptr<uint8_t> BlockOf(int32_t device) const;
  // Forgets the block of `device` (those holding BlockOf keep it alive), so the next Carve
  // allocates a fresh one: after a batch failed with a receive UCX could not end, whose
  // late bytes must not land in a later batch's staging.
  void Abandon(int32_t device) { blocks_.erase(device); }

  // Bytes held on `device` (0 when none).
  int64_t HeldBytes(int32_t device) const;
  // How many times memory was allocated: for tests and the allocation counter.
  int64_t allocations() const { return allocations_; }

 private:
  struct Block {
    std::shared_ptr<uint8_t> memory;
    int64_t bytes = 0;
  };
  Allocator allocate_;
  std::map<int32_t, Block> blocks_;
  int64_t allocations_ = 0;
};

// An allocator of host memory, prefaulted (HostMemory::Backing::kPrefaulted), for the host
// path and for tests.
StagingPool::Allocator HostStagingAllocator();

}  // namespace refit::transport

#endif  // REFIT_TRANSPORT_STAGING_POOL_H_

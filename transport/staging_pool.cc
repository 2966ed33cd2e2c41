#include "transport/staging_pool.h"

#include "absl/strings/str_cat.h"
#include "transport/host_memory.h"

namespace refit::transport {

absl::StatusOr<std::vector<uint8_t*>> StagingPool::Carve(int32_t device,
                                                         const std::vector<int64_t>& sizes) {
  for (int64_t size : sizes) {
    if (size < 0) {
      return absl::InvalidArgumentError(absl::StrCat("staging message of ", size, " bytes"));
    }
  }
  const int64_t total = CarvedBytes(sizes);
  Block& block = blocks_[device];
  if (block.bytes < total) {
    block.memory.reset();  // free the old block before asking for the larger one
    block.bytes = 0;
    absl::StatusOr<std::shared_ptr<uint8_t>> memory = allocate_(total, device);
    if (!memory.ok()) {
      return absl::Status(
          memory.status().code(),
          absl::StrCat("staging ", total, " bytes on ",
                       device < 0 ? std::string("the host") : absl::StrCat("GPU ", device), ": ",
                       memory.status().message()));
    }
    block.memory = std::move(*memory);
    block.bytes = total;
    ++allocations_;
  }
  std::vector<uint8_t*> carved;
  carved.reserve(sizes.size());
  uint8_t* cursor = block.memory.get();
  for (int64_t size : sizes) {
    carved.push_back(cursor);
    cursor += AlignUp(size);
  }
  return carved;
}

std::shared_ptr<uint8_t> StagingPool::BlockOf(int32_t device) const {
  auto it = blocks_.find(device);
  return it == blocks_.end() ? nullptr : it->second.memory;
}

int64_t StagingPool::HeldBytes(int32_t device) const {
  auto it = blocks_.find(device);
  return it == blocks_.end() ? 0 : it->second.bytes;
}

StagingPool::Allocator HostStagingAllocator() {
  return [](int64_t bytes, int32_t device) -> absl::StatusOr<std::shared_ptr<uint8_t>> {
    if (device >= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("the host allocator cannot place memory on GPU ", device));
    }
    absl::StatusOr<std::unique_ptr<HostMemory>> memory =
        HostMemory::Allocate(std::max<int64_t>(bytes, 1), HostMemory::Backing::kPrefaulted);
    if (!memory.ok()) return memory.status();
    std::shared_ptr<HostMemory> owner = std::move(*memory);
    return std::shared_ptr<uint8_t>(owner, owner->data());
  };
}

}  // namespace refit::transport

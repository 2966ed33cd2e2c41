#include "transport/host_memory.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace refit::transport {

absl::StatusOr<std::unique_ptr<HostMemory>> HostMemory::Allocate(int64_t bytes) {
  if (bytes <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("host memory of ", bytes, " bytes"));
  }
  void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (data == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate ", bytes, " bytes of host memory: ", std::strerror(errno)));
  }
  return std::unique_ptr<HostMemory>(new HostMemory(static_cast<uint8_t*>(data), bytes));
}

HostMemory::~HostMemory() { munmap(data_, bytes_); }

}  // namespace refit::transport

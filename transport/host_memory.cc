#include "transport/host_memory.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "transport/page_touch.h"

namespace refit::transport {

absl::StatusOr<std::unique_ptr<HostMemory>> HostMemory::Allocate(int64_t bytes, Backing backing) {
  if (bytes <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("host memory of ", bytes, " bytes"));
  }
  // MAP_POPULATE faults every page in now (best effort: under memory pressure some may
  // still be backed on first touch).
  const int flags =
      MAP_PRIVATE | MAP_ANONYMOUS | (backing == Backing::kPrefaulted ? MAP_POPULATE : 0);
  void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, flags, -1, 0);
  if (data == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate ", bytes, " bytes of host memory: ", std::strerror(errno)));
  }
  // Our own memory, just populated: touching it cannot fault.
  if (backing == Backing::kPrefaulted) TouchEveryPage(static_cast<const uint8_t*>(data), bytes);
  return std::unique_ptr<HostMemory>(new HostMemory(static_cast<uint8_t*>(data), bytes));
}

HostMemory::~HostMemory() { munmap(data_, bytes_); }

}  // namespace refit::transport

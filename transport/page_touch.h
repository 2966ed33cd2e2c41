// Touches every page of a mapping once, so this process's page tables, and a hypervisor's
// shadow page tables where the machine is a VM that keeps them, hold every page before the
// data plane runs. MAP_POPULATE and MADV_POPULATE_WRITE fill the kernel's page tables but
// not a shadow MMU's: on such a VM (the development machine) the first copy through a
// freshly mapped 600 MB costs 1.5 s against 0.03 s once touched, and without this the
// first epoch paid it for every segment and staging block (5 s against 0.7 s warm).
#ifndef REFIT_TRANSPORT_PAGE_TOUCH_H_
#define REFIT_TRANSPORT_PAGE_TOUCH_H_

#include <unistd.h>

#include <cstdint>

namespace refit::transport {

// Reads one byte of every page of [data, data + bytes): enough for later writes too once
// the pages were populated writable. A page the mapping lost (a shrunk segment) raises
// SIGBUS: run it under GuardMemoryAccess for memory another process owns.
inline void TouchEveryPage(const uint8_t* data, int64_t bytes) {
  static const int64_t page = sysconf(_SC_PAGESIZE);
  const volatile uint8_t* bytes_read = data;
  uint8_t sink = 0;
  for (int64_t at = 0; at < bytes; at += page) sink ^= bytes_read[at];
  if (bytes > 0) sink ^= bytes_read[bytes - 1];
  static_cast<void>(sink);
}

}  // namespace refit::transport

#endif  // REFIT_TRANSPORT_PAGE_TOUCH_H_

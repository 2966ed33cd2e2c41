// Copies between host memory spread over threads. The local copies of one batch (and the
// pieces written straight into same-host peers' ranks) write disjoint bytes, so they can
// run at once: on a node with many cores one thread copying a batch of hundreds of
// megabytes is what bounds the epoch.
#ifndef REFIT_TRANSPORT_HOST_COPIES_H_
#define REFIT_TRANSPORT_HOST_COPIES_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "transport/strided_copy.h"

namespace refit::transport {

// One box copy, hashed on the way as asked (CopyBox), under GuardMemoryAccess.
struct HostCopy {
  Dims extent;
  int element_bytes = 0;
  ConstStridedRef from;
  StridedRef to;
  bool hash_source = false;
  bool hash_destination = false;
  // Filled by RunHostCopies.
  uint64_t source_hash = 0;
  uint64_t destination_hash = 0;
  absl::Status status;
};

// Runs every copy of `copies` on up to `threads` threads (the caller's among them), each
// thread taking a run of consecutive copies of about equal bytes; a batch under a few
// megabytes stays on the calling thread. Each copy's status says how it went.
void RunHostCopies(std::vector<HostCopy>* copies, int threads);

}  // namespace refit::transport

#endif  // REFIT_TRANSPORT_HOST_COPIES_H_

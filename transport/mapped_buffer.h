// A rank's buffer as refitd holds it: host memory (a mapped shared-memory segment) or GPU
// memory (a CUDA IPC mapping). Destroying it releases the mapping.
#ifndef REFIT_TRANSPORT_MAPPED_BUFFER_H_
#define REFIT_TRANSPORT_MAPPED_BUFFER_H_

#include <cstdint>

#include "absl/status/status.h"

namespace refit::transport {

class MappedBuffer {
 public:
  virtual ~MappedBuffer() = default;
  virtual uint8_t* data() const = 0;
  virtual int64_t bytes() const = 0;
  // The CUDA device the memory is on; -1 for host memory.
  virtual int32_t device() const { return -1; }
  // OK while every byte of the mapping is backed, so touching it cannot fault; an error
  // naming the buffer and the cause when its owner shrank it since it was mapped.
  virtual absl::Status CheckBacked() const { return absl::OkStatus(); }
  // Whether the memory its name leads to now is still what was mapped (false: the owner
  // removed it, or made a new one under the same name).
  virtual bool StillNamed() const { return true; }
};

}  // namespace refit::transport

#endif  // REFIT_TRANSPORT_MAPPED_BUFFER_H_

// Private host memory that refitd allocates for itself (anonymous pages, zero-filled): the
// shadow copies of staged destination buffers (committed only when touched) and the host
// staging of the data plane (prefaulted: every page is backed at allocation, so no epoch
// pays for the first touch).
#ifndef REFIT_TRANSPORT_HOST_MEMORY_H_
#define REFIT_TRANSPORT_HOST_MEMORY_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "transport/mapped_buffer.h"

namespace refit::transport {

class HostMemory : public MappedBuffer {
 public:
  enum class Backing { kOnFirstTouch, kPrefaulted };
  // RESOURCE_EXHAUSTED (with the size) when the memory cannot be had.
  static absl::StatusOr<std::unique_ptr<HostMemory>> Allocate(
      int64_t bytes, Backing backing = Backing::kOnFirstTouch);

  ~HostMemory() override;
  HostMemory(const HostMemory&) = delete;
  HostMemory& operator=(const HostMemory&) = delete;

  uint8_t* data() const override { return data_; }
  int64_t bytes() const override { return bytes_; }

 private:
  HostMemory(uint8_t* data, int64_t bytes) : data_(data), bytes_(bytes) {}

  uint8_t* data_;
  int64_t bytes_;
};

}  // namespace refit::transport

#endif  // REFIT_TRANSPORT_HOST_MEMORY_H_

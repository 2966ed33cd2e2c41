// A block of GPU memory owned by refitd (staging for NCCL messages), freed with the object.
#ifndef REFIT_TRANSPORT_GPU_DEVICE_MEMORY_H_
#define REFIT_TRANSPORT_GPU_DEVICE_MEMORY_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"

namespace refit::transport::gpu {

class DeviceMemory {
 public:
  static absl::StatusOr<std::unique_ptr<DeviceMemory>> Allocate(int64_t bytes, int32_t device);
  ~DeviceMemory();
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  uint8_t* data() const { return data_; }
  int32_t device() const { return device_; }

 private:
  DeviceMemory(uint8_t* data, int32_t device) : data_(data), device_(device) {}
  uint8_t* data_;
  int32_t device_;
};

}  // namespace refit::transport::gpu

#endif  // REFIT_TRANSPORT_GPU_DEVICE_MEMORY_H_

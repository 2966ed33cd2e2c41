#include "transport/relay_buffers.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace refit::transport {
namespace {

std::string DescribeBox(const Dims& offset, const Dims& extent) {
  return absl::StrCat("offset [", absl::StrJoin(offset, ", "), "] extent [",
                      absl::StrJoin(extent, ", "), "]");
}

}  // namespace

absl::StatusOr<StridedRef> RelayBuffers::Locate(const v1::Endpoint& endpoint,
                                                const std::string& tensor, const Dims& offset,
                                                const Dims& extent, int32_t device) {
  const std::string name = absl::StrCat("relay buffer ", endpoint.relay_buffer(),
                                        " of source rank ", endpoint.rank(), " (", tensor, ")");
  auto info = tensors_.find(tensor);
  if (info == tensors_.end()) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": unknown tensor"));
  }
  const Dims& shape = info->second.shape;
  const Dims held_offset(endpoint.buffer_offset().begin(), endpoint.buffer_offset().end());
  const Dims held_extent(endpoint.buffer_extent().begin(), endpoint.buffer_extent().end());
  if (held_offset.size() != shape.size() || held_extent.size() != shape.size() ||
      offset.size() != shape.size() || extent.size() != shape.size()) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": its box or the transfer's box has ",
                                                   "the wrong number of dims for the tensor"));
  }
  int64_t volume = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (held_offset[d] < 0 || held_extent[d] < 0 || held_offset[d] + held_extent[d] > shape[d]) {
      return absl::OutOfRangeError(absl::StrCat(
          name, ": its box ", DescribeBox(held_offset, held_extent), " leaves the tensor"));
    }
    if (offset[d] < held_offset[d] || extent[d] < 0 ||
        offset[d] + extent[d] > held_offset[d] + held_extent[d]) {
      return absl::OutOfRangeError(
          absl::StrCat(name, ": the transfer's box ", DescribeBox(offset, extent),
                       " is not inside its box ", DescribeBox(held_offset, held_extent)));
    }
    volume *= held_extent[d];
  }
  Buffer& buffer = buffers_[KeyOf(endpoint)];
  if (buffer.memory == nullptr) {
    const int64_t bytes = std::max<int64_t>(1, volume * info->second.element_bytes);
    absl::StatusOr<std::shared_ptr<uint8_t>> memory = allocate_(bytes, device);
    if (!memory.ok()) {
      return absl::Status(memory.status().code(),
                          absl::StrCat(name, ": ", memory.status().message()));
    }
    buffer.memory = std::move(*memory);
    buffer.tensor = tensor;
    buffer.offset = held_offset;
    buffer.extent = held_extent;
    buffer.device = device;
    buffer.bytes = bytes;
    live_bytes_ += bytes;
    ++live_buffers_;
    peak_bytes_ = std::max(peak_bytes_, live_bytes_);
  } else if (buffer.tensor != tensor || buffer.offset != held_offset ||
             buffer.extent != held_extent || buffer.device != device) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": the plan names it with another tensor, box or device than ",
                     buffer.tensor, " ", DescribeBox(buffer.offset, buffer.extent)));
  }
  const Dims strides = RowMajorStrides(held_extent);
  int64_t element = 0;
  for (size_t d = 0; d < shape.size(); ++d) element += (offset[d] - held_offset[d]) * strides[d];
  return StridedRef{buffer.memory.get() + element * info->second.element_bytes, strides, device};
}

void RelayBuffers::ReadDone(const v1::Endpoint& endpoint) {
  auto it = buffers_.find(KeyOf(endpoint));
  if (it == buffers_.end() || --it->second.reads_left > 0) return;
  if (it->second.memory != nullptr) {
    live_bytes_ -= it->second.bytes;
    --live_buffers_;
  }
  buffers_.erase(it);
}

StagingPool::Allocator RelayBufferAllocator(StagingPool::Allocator device_allocate) {
  return [device_allocate = std::move(device_allocate)](
             int64_t bytes, int32_t device) -> absl::StatusOr<std::shared_ptr<uint8_t>> {
    if (device >= 0) return device_allocate(bytes, device);
    return std::shared_ptr<uint8_t>(new uint8_t[bytes], std::default_delete<uint8_t[]>());
  };
}

}  // namespace refit::transport

#include "transport/relay_buffers.h"

#include <algorithm>
#include <iterator>
#include <vector>

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

std::string RelayBuffers::NameOf(const v1::Endpoint& endpoint, const std::string& tensor) const {
  return absl::StrCat("relay buffer ", endpoint.relay_buffer(), " of source rank ", endpoint.rank(),
                      " (", tensor, ")");
}

absl::Status RelayBuffers::Prepare(const v1::Plan& plan,
                                   const std::function<bool(int64_t)>& is_local,
                                   const std::function<int32_t(int64_t)>& device_of) {
  buffers_.clear();
  blocks_.clear();
  block_bytes_ = 0;
  for (int32_t b = 0; b < plan.batches_size(); ++b) {
    for (const v1::Transfer& t : plan.batches(b).transfers()) {
      for (const v1::Endpoint* e : {&t.dst(), &t.src()}) {
        if (e->kind() != v1::ENDPOINT_RELAY_BUFFER || !is_local(e->rank())) continue;
        auto [it, added] = buffers_.try_emplace(KeyOf(*e));
        Buffer& buffer = it->second;
        if (added) {
          auto info = tensors_.find(t.tensor());
          if (info == tensors_.end()) {
            return absl::InvalidArgumentError(
                absl::StrCat(NameOf(*e, t.tensor()), ": unknown tensor"));
          }
          int64_t volume = 1;
          for (int64_t extent : e->buffer_extent()) volume *= std::max<int64_t>(0, extent);
          buffer.tensor = t.tensor();
          buffer.offset.assign(e->buffer_offset().begin(), e->buffer_offset().end());
          buffer.extent.assign(e->buffer_extent().begin(), e->buffer_extent().end());
          buffer.device = device_of(e->rank());
          buffer.bytes = std::max<int64_t>(1, volume * info->second.element_bytes);
          buffer.first_batch = b;
        }
        buffer.last_batch = b;
        if (e == &t.src()) ++buffer.reads_left;
      }
    }
  }
  for (const auto& [device, bytes] : LayOut(plan.batches_size())) {
    if (bytes == 0) continue;
    absl::StatusOr<std::shared_ptr<uint8_t>> block = allocate_(bytes, device);
    if (!block.ok()) {
      return absl::Status(
          block.status().code(),
          absl::StrCat("relay buffers: ", bytes, " bytes on ",
                       device < 0 ? std::string("the host") : absl::StrCat("device ", device), ": ",
                       block.status().message()));
    }
    blocks_[device] = *std::move(block);
    block_bytes_ += bytes;
  }
  return absl::OkStatus();
}

std::map<int32_t, int64_t> RelayBuffers::LayOut(int32_t num_batches) {
  std::vector<std::vector<Buffer*>> filled(num_batches), freed(num_batches);
  for (auto& [key, buffer] : buffers_) {
    filled[buffer.first_batch].push_back(&buffer);
    freed[buffer.last_batch].push_back(&buffer);
  }
  // Per device: its free ranges (offset -> bytes) below its end.
  struct Space {
    std::map<int64_t, int64_t> free;
    int64_t end = 0;
  };
  std::map<int32_t, Space> spaces;
  std::map<int32_t, int64_t> sizes;
  for (int32_t b = 0; b < num_batches; ++b) {
    for (Buffer* buffer : filled[b]) {
      Space& space = spaces[buffer->device];
      const int64_t bytes = StagingPool::AlignUp(buffer->bytes);
      auto fit = std::find_if(space.free.begin(), space.free.end(),
                              [&](const auto& range) { return range.second >= bytes; });
      if (fit == space.free.end()) {
        buffer->place = space.end;
        space.end += bytes;
        sizes[buffer->device] = std::max(sizes[buffer->device], space.end);
        continue;
      }
      buffer->place = fit->first;
      if (fit->second > bytes) space.free[fit->first + bytes] = fit->second - bytes;
      space.free.erase(fit);
    }
    // Freed after the batch of the last read: a buffer filled in this batch does not
    // take the place of one read in it.
    for (Buffer* buffer : freed[b]) {
      Space& space = spaces[buffer->device];
      int64_t begin = buffer->place, bytes = StagingPool::AlignUp(buffer->bytes);
      auto next = space.free.find(begin + bytes);
      if (next != space.free.end()) {
        bytes += next->second;
        space.free.erase(next);
      }
      auto before = space.free.lower_bound(begin);
      if (before != space.free.begin() &&
          std::prev(before)->first + std::prev(before)->second == begin) {
        --before;
        begin = before->first;
        bytes += before->second;
        space.free.erase(before);
      }
      if (begin + bytes == space.end) {
        space.end = begin;  // the top of the block is free again
      } else {
        space.free[begin] = bytes;
      }
    }
  }
  return sizes;
}

absl::StatusOr<StridedRef> RelayBuffers::Locate(const v1::Endpoint& endpoint,
                                                const std::string& tensor, const Dims& offset,
                                                const Dims& extent, int32_t device) {
  const std::string name = NameOf(endpoint, tensor);
  auto info = tensors_.find(tensor);
  if (info == tensors_.end()) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": unknown tensor"));
  }
  auto found = buffers_.find(KeyOf(endpoint));
  if (found == buffers_.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat(name, ": not among the relay buffers this daemon's part of the plan uses"));
  }
  Buffer& buffer = found->second;
  const Dims& shape = info->second.shape;
  const Dims held_offset(endpoint.buffer_offset().begin(), endpoint.buffer_offset().end());
  const Dims held_extent(endpoint.buffer_extent().begin(), endpoint.buffer_extent().end());
  if (held_offset.size() != shape.size() || held_extent.size() != shape.size() ||
      offset.size() != shape.size() || extent.size() != shape.size()) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": its box or the transfer's box has ",
                                                   "the wrong number of dims for the tensor"));
  }
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
  }
  if (buffer.tensor != tensor || buffer.offset != held_offset || buffer.extent != held_extent ||
      buffer.device != device) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": the plan names it with another tensor, box or device than ",
                     buffer.tensor, " ", DescribeBox(buffer.offset, buffer.extent)));
  }
  if (!buffer.filled) {
    buffer.filled = true;
    live_bytes_ += buffer.bytes;
    ++live_buffers_;
    peak_bytes_ = std::max(peak_bytes_, live_bytes_);
  }
  const Dims strides = RowMajorStrides(held_extent);
  int64_t element = 0;
  for (size_t d = 0; d < shape.size(); ++d) element += (offset[d] - held_offset[d]) * strides[d];
  uint8_t* const block = blocks_.at(device).get();
  return StridedRef{block + buffer.place + element * info->second.element_bytes, strides, device};
}

void RelayBuffers::ReadDone(const v1::Endpoint& endpoint) {
  auto it = buffers_.find(KeyOf(endpoint));
  if (it == buffers_.end() || --it->second.reads_left > 0) return;
  if (it->second.filled) {
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

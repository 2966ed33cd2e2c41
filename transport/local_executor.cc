#include "transport/local_executor.h"

#include <map>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace refit::transport {
namespace {

// Full-tensor scratch buffers by (role, rank, tensor), created on first use.
class ScratchArena {
 public:
  explicit ScratchArena(const TensorTable& tensors) : tensors_(tensors) {}

  absl::StatusOr<StridedRef> Locate(v1::Role role, int64_t rank, const std::string& tensor,
                                    const Dims& offset, const Dims& extent) {
    auto info = tensors_.find(tensor);
    if (info == tensors_.end()) {
      return absl::InvalidArgumentError(absl::StrCat("scratch of unknown tensor ", tensor));
    }
    const Dims& shape = info->second.shape;
    if (offset.size() != shape.size() || extent.size() != shape.size()) {
      return absl::InvalidArgumentError(absl::StrCat(tensor, ": box has the wrong dims"));
    }
    int64_t volume = 1;
    for (size_t d = 0; d < shape.size(); ++d) {
      if (offset[d] < 0 || extent[d] < 0 || offset[d] + extent[d] > shape[d]) {
        return absl::OutOfRangeError(absl::StrCat(tensor, ": box leaves the tensor"));
      }
      volume *= shape[d];
    }
    std::vector<uint8_t>& buffer = buffers_[std::make_tuple(role, rank, tensor)];
    if (buffer.empty()) buffer.resize(volume * info->second.element_bytes);
    const Dims strides = RowMajorStrides(shape);
    int64_t element = 0;
    for (size_t d = 0; d < shape.size(); ++d) element += offset[d] * strides[d];
    return StridedRef{buffer.data() + element * info->second.element_bytes, strides};
  }

 private:
  const TensorTable& tensors_;
  std::map<std::tuple<int, int64_t, std::string>, std::vector<uint8_t>> buffers_;
};

v1::Role RoleOf(v1::EndpointKind kind) {
  return kind == v1::ENDPOINT_SOURCE_VIEW || kind == v1::ENDPOINT_SOURCE_SCRATCH
             ? v1::ROLE_SOURCE
             : v1::ROLE_DESTINATION;
}

}  // namespace

absl::StatusOr<ExecutionStats> ExecuteLocally(const v1::Plan& plan, const BufferMap& buffers) {
  ScratchArena scratch(buffers.tensors());
  ExecutionStats stats;
  auto locate = [&](const v1::Endpoint& e, const v1::Transfer& t, const Dims& offset,
                    const Dims& extent) -> absl::StatusOr<StridedRef> {
    const v1::Role role = RoleOf(e.kind());
    if (e.kind() == v1::ENDPOINT_SOURCE_VIEW || e.kind() == v1::ENDPOINT_DESTINATION_VIEW) {
      return buffers.Locate(role, e.rank(), e.view(), t.tensor(), offset, extent);
    }
    if (e.kind() == v1::ENDPOINT_UNSPECIFIED) {
      return absl::InvalidArgumentError("endpoint without a kind");
    }
    return scratch.Locate(role, e.rank(), t.tensor(), offset, extent);
  };
  for (int b = 0; b < plan.batches_size(); ++b) {
    for (const v1::Transfer& t : plan.batches(b).transfers()) {
      const Dims offset(t.offset().begin(), t.offset().end());
      const Dims extent(t.extent().begin(), t.extent().end());
      absl::StatusOr<StridedRef> from = locate(t.src(), t, offset, extent);
      absl::StatusOr<StridedRef> to =
          from.ok() ? locate(t.dst(), t, offset, extent) : from.status();
      if (!to.ok()) {
        return absl::Status(
            to.status().code(),
            absl::StrCat("batch ", b, ", transfer of ", t.tensor(), ": ", to.status().message()));
      }
      const int element_bytes = buffers.tensors().at(t.tensor()).element_bytes;
      CopyBox(extent, element_bytes, *from, *to);
      ++stats.transfers;
      stats.bytes += t.bytes();
      stats.runs += CountRuns(extent, from->strides, to->strides);
      stats.bytes_by_route[t.route()] += t.bytes();
    }
  }
  return stats;
}

}  // namespace refit::transport

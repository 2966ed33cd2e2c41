#include "transport/scratch_arena.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace refit::transport {

absl::StatusOr<StridedRef> ScratchArena::Locate(v1::Role role, int64_t rank,
                                                const std::string& tensor, const Dims& offset,
                                                const Dims& extent) {
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

}  // namespace refit::transport

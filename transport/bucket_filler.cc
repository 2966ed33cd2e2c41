#include "transport/bucket_filler.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "transport/gpu/device_copy.h"

namespace refit::transport {
namespace {

constexpr int64_t kPartAlignment = 64;

int64_t Aligned(int64_t n) { return (n + kPartAlignment - 1) / kPartAlignment * kPartAlignment; }

int64_t Volume(const Dims& extent, size_t from = 0) {
  int64_t v = 1;
  for (size_t d = from; d < extent.size(); ++d) v *= extent[d];
  return v;
}

}  // namespace

absl::StatusOr<std::vector<std::pair<Dims, Dims>>> SplitRowMajor(const Dims& extent,
                                                                 int element_bytes,
                                                                 int64_t max_bytes) {
  std::vector<std::pair<Dims, Dims>> parts;
  if (HoldsNothing(extent)) return parts;
  if (element_bytes > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("an element of ", element_bytes, " bytes does not fit in ", max_bytes));
  }
  if (Volume(extent) * element_bytes <= max_bytes) {
    parts.emplace_back(Dims(extent.size(), 0), extent);
    return parts;
  }
  // The first dim whose slab (the elements of one index of it) fits is cut into runs of
  // as many indices as fit; the dims before it are walked one index at a time.
  size_t cut = 0;
  while (Volume(extent, cut + 1) * element_bytes > max_bytes) ++cut;
  const int64_t slab_bytes = Volume(extent, cut + 1) * element_bytes;
  const int64_t run = max_bytes / slab_bytes;
  Dims index(cut, 0);  // over the dims before `cut`
  while (true) {
    for (int64_t start = 0; start < extent[cut]; start += run) {
      Dims offset(extent.size(), 0), part = extent;
      for (size_t d = 0; d < cut; ++d) {
        offset[d] = index[d];
        part[d] = 1;
      }
      offset[cut] = start;
      part[cut] = std::min(run, extent[cut] - start);
      parts.emplace_back(std::move(offset), std::move(part));
    }
    size_t d = cut;
    while (d > 0 && ++index[d - 1] == extent[d - 1]) index[--d] = 0;
    if (d == 0) break;
  }
  return parts;
}

BucketFiller::BucketFiller(uint8_t* bucket, int64_t capacity, SendFn send, AwaitTakenFn await_taken)
    : bucket_(bucket),
      half_bytes_(capacity / 2 / kPartAlignment * kPartAlignment),
      send_(std::move(send)),
      await_taken_(std::move(await_taken)) {}

absl::Status BucketFiller::Write(const std::string& tensor, const Dims& offset, const Dims& extent,
                                 int element_bytes, const ConstStridedRef& from) {
  absl::StatusOr<std::vector<std::pair<Dims, Dims>>> parts =
      SplitRowMajor(extent, element_bytes, half_bytes_);
  if (!parts.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("\"", tensor, "\": ", parts.status().message(),
                                                   " (half of the rank's bucket)"));
  }
  for (const auto& [relative, part] : *parts) {
    const int64_t bytes = Volume(part) * element_bytes;
    if (Aligned(used_) + bytes > half_bytes_) {
      absl::Status switched = SwitchHalves();
      if (!switched.ok()) return switched;
    }
    const int64_t at = half_ * half_bytes_ + Aligned(used_);
    ConstStridedRef source = from;
    int64_t element_offset = 0;
    for (size_t d = 0; d < relative.size(); ++d) element_offset += relative[d] * from.strides[d];
    source.base += element_offset * element_bytes;
    const StridedRef dense{bucket_ + at, RowMajorStrides(part), -1};
    absl::Status copied = gpu::CopyAnyBox(part, element_bytes, source, dense);
    if (!copied.ok()) return copied;
    BucketPart& placed = parts_.emplace_back();
    placed.tensor = tensor;
    placed.extent = part;
    placed.offset = offset;
    for (size_t d = 0; d < offset.size(); ++d) placed.offset[d] += relative[d];
    placed.byte_offset = at;
    used_ = Aligned(used_) + bytes;
    bytes_written_ += bytes;
  }
  return absl::OkStatus();
}

absl::Status BucketFiller::SwitchHalves() {
  absl::StatusOr<int64_t> sent = send_(parts_, /*last=*/false);
  if (!sent.ok()) return sent.status();
  ++buckets_delivered_;
  outstanding_[half_] = *sent;
  parts_.clear();
  used_ = 0;
  half_ ^= 1;
  if (outstanding_[half_] == 0) return absl::OkStatus();
  absl::Status taken = await_taken_(outstanding_[half_]);
  outstanding_[half_] = 0;
  return taken;
}

absl::Status BucketFiller::Finish() {
  absl::StatusOr<int64_t> sent = send_(parts_, /*last=*/true);
  if (!sent.ok()) return sent.status();
  ++buckets_delivered_;
  parts_.clear();
  used_ = 0;
  outstanding_[0] = outstanding_[1] = 0;
  return await_taken_(*sent);  // hand-overs are taken in order: this covers both halves
}

}  // namespace refit::transport

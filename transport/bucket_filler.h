// The bucketed path's data-plane half: a destination rank whose weights refitd cannot
// reach (RankLayout.bucketed) receives them through one bounded staging bucket. The
// filler copies each piece the plan delivers into the bucket, densely (row-major, each
// part 64-byte aligned), and hands the full bucket over (`deliver`, which returns once
// the rank's process has copied it out) before it writes more. A piece larger than the
// bucket goes in consecutive row-major parts, so peak memory is the bucket, whatever the
// model.
#ifndef REFIT_TRANSPORT_BUCKET_FILLER_H_
#define REFIT_TRANSPORT_BUCKET_FILLER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "transport/strided_copy.h"

namespace refit::transport {

// One part of a piece in the bucket: the global box [offset, offset + extent) of
// `tensor`, dense row-major from `byte_offset`.
struct BucketPart {
  std::string tensor;
  Dims offset;
  Dims extent;
  int64_t byte_offset = 0;
};

// A box of `extent` cut into consecutive row-major parts of at most `max_bytes` each
// (offsets relative to the box): the first dims are walked one index at a time, the
// first dim whose slab fits is cut into runs. INVALID_ARGUMENT when one element is larger.
absl::StatusOr<std::vector<std::pair<Dims, Dims>>> SplitRowMajor(const Dims& extent,
                                                                 int element_bytes,
                                                                 int64_t max_bytes);

class BucketFiller {
 public:
  // Hands the bucket's parts (in the order written) to the rank's process and returns
  // once it has taken them; `last` on the epoch's final call.
  using DeliverFn = std::function<absl::Status(const std::vector<BucketPart>& parts, bool last)>;

  BucketFiller(uint8_t* bucket, int64_t capacity, DeliverFn deliver)
      : bucket_(bucket), capacity_(capacity), deliver_(std::move(deliver)) {}

  // Copies the box (global `offset`, `extent`) of `tensor` from `from` into the bucket,
  // delivering the bucket first whenever the next part does not fit.
  absl::Status Write(const std::string& tensor, const Dims& offset, const Dims& extent,
                     int element_bytes, const StridedRef& from);
  // Delivers what is left, as the epoch's last bucket (also when empty).
  absl::Status Finish();

  int64_t buckets_delivered() const { return buckets_delivered_; }
  int64_t bytes_written() const { return bytes_written_; }

 private:
  absl::Status Deliver(bool last);

  uint8_t* const bucket_;
  const int64_t capacity_;
  const DeliverFn deliver_;
  std::vector<BucketPart> parts_;
  int64_t used_ = 0;
  int64_t buckets_delivered_ = 0;
  int64_t bytes_written_ = 0;
};

}  // namespace refit::transport

#endif  // REFIT_TRANSPORT_BUCKET_FILLER_H_

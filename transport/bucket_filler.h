// The bucketed path's data-plane half: a destination rank whose weights refitd cannot
// reach (RankLayout.bucketed) receives them through one bounded staging bucket. The
// filler copies each piece the plan delivers into the bucket, densely (row-major, each
// part 64-byte aligned), and hands each full half of it over to the rank's process. A
// piece larger than a half goes in consecutive row-major parts, so peak memory is the
// bucket, whatever the model.
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

// The bucket is two halves, filled in turn: while the rank's process copies one half out,
// the data plane fills the other, and it waits for a half to be taken only before it
// refills it.
class BucketFiller {
 public:
  // Hands `parts` (in one half of the bucket, in the order written) to the rank's process
  // without waiting; returns the hand-over's sequence (1, 2, ...). `last` on the epoch's
  // final hand-over.
  using SendFn =
      std::function<absl::StatusOr<int64_t>(const std::vector<BucketPart>& parts, bool last)>;
  // Returns once the process has taken every hand-over up to `sequence`.
  using AwaitTakenFn = std::function<absl::Status(int64_t sequence)>;

  BucketFiller(uint8_t* bucket, int64_t capacity, SendFn send, AwaitTakenFn await_taken);

  // Copies the box (global `offset`, `extent`) of `tensor` from `from` into the bucket,
  // handing a half over whenever the next part does not fit in it.
  absl::Status Write(const std::string& tensor, const Dims& offset, const Dims& extent,
                     int element_bytes, const ConstStridedRef& from);
  // Hands over what is left, as the epoch's last bucket (also when empty), and waits until
  // the process has taken everything.
  absl::Status Finish();

  int64_t buckets_delivered() const { return buckets_delivered_; }
  int64_t bytes_written() const { return bytes_written_; }

 private:
  // Hands the current half over and moves to the other, once the process has taken it.
  absl::Status SwitchHalves();

  uint8_t* const bucket_;
  const int64_t half_bytes_;
  const SendFn send_;
  const AwaitTakenFn await_taken_;
  int half_ = 0;
  int64_t outstanding_[2] = {0, 0};  // the sequence each half was handed over as (0: none)
  std::vector<BucketPart> parts_;
  int64_t used_ = 0;  // bytes of the current half
  int64_t buckets_delivered_ = 0;
  int64_t bytes_written_ = 0;
};

}  // namespace refit::transport

#endif  // REFIT_TRANSPORT_BUCKET_FILLER_H_

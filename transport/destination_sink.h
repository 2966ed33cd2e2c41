// Where the plan executor writes the pieces of destination ranks whose memory refitd does
// not hold (bucketed ranks): the daemon streams them to the rank's process through a
// bounded bucket (transport/bucket_filler.h, refitd/bucket_streams.h).
#ifndef REFIT_TRANSPORT_DESTINATION_SINK_H_
#define REFIT_TRANSPORT_DESTINATION_SINK_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "transport/strided_copy.h"

namespace refit::transport {

class DestinationSink {
 public:
  virtual ~DestinationSink() = default;
  // Whether destination rank `rank`'s pieces go through this sink.
  virtual bool Takes(int64_t rank) const = 0;
  // Takes the box [offset, offset + extent) of `tensor` for `rank`, read from `from`; may
  // block until the rank's process has made room.
  virtual absl::Status Write(int64_t rank, const std::string& tensor, const Dims& offset,
                             const Dims& extent, int element_bytes,
                             const ConstStridedRef& from) = 0;
  // The plan has written everything: hands every rank what is left (its last bucket).
  virtual absl::Status Finish() = 0;
};

}  // namespace refit::transport

#endif  // REFIT_TRANSPORT_DESTINATION_SINK_H_

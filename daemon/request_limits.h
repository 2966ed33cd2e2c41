// Limits on what one rank's registration may hold, checked where it enters (refitd's
// local socket, and again at the coordinator for what daemons forward), before any
// validation or planning work is spent on it. They sit far above any real model
// (DeepSeek-V3 registers ~2,000 views per rank) and far below what would let one request
// exhaust a daemon.
#ifndef REFIT_DAEMON_REQUEST_LIMITS_H_
#define REFIT_DAEMON_REQUEST_LIMITS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "proto/refit.pb.h"

namespace refit::daemon {

struct RegistrationLimits {
  int64_t max_rank = (int64_t{1} << 20) - 1;
  int max_tensors = 1 << 16;
  int max_views = 1 << 16;
  int max_buffers = 1 << 16;
  int max_dims = 8;
  size_t max_name_bytes = 256;
};

// OK, or INVALID_ARGUMENT naming the rank, the field and the limit.
absl::Status CheckRegistrationLimits(
    v1::Role role, const v1::RankLayout& layout,
    const google::protobuf::RepeatedPtrField<v1::TensorSpec>& tensors,
    const RegistrationLimits& limits = {});

}  // namespace refit::daemon

#endif  // REFIT_DAEMON_REQUEST_LIMITS_H_

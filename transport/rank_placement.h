// Where the ranks of a refit group live: which daemon (by index) serves each rank, and
// which CUDA device holds its buffers. Built by the coordinator from the cluster's
// placement and by each refitd from its plan slice; the data plane reads it per transfer.
// A value type with no data-plane dependency, so the coordinator links none.
//
// Threading: built by one thread, then read concurrently (const methods only).
#ifndef REFIT_TRANSPORT_RANK_PLACEMENT_H_
#define REFIT_TRANSPORT_RANK_PLACEMENT_H_

#include <cstdint>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "proto/refit.pb.h"
#include "transport/rank_key.h"

namespace refit::transport {

// Which daemon (by index) serves each rank of the refit group.
class RankPlacement {
 public:
  void Place(v1::Role role, int64_t rank, int32_t daemon) { daemons_[{role, rank}] = daemon; }
  // The rank's buffers are GPU memory on CUDA device `device` of its daemon's node.
  void PlaceDevice(v1::Role role, int64_t rank, int32_t device) { devices_[{role, rank}] = device; }
  // The rank's CUDA device, or -1 for host memory.
  int32_t DeviceOf(v1::Role role, int64_t rank) const {
    auto it = devices_.find({role, rank});
    return it == devices_.end() ? -1 : it->second;
  }
  // Ranks not placed explicitly live on `daemon` (-1: an error).
  void SetDefault(int32_t daemon) { default_daemon_ = daemon; }
  // NOT_FOUND, naming the rank, when it has no daemon and there is no default.
  absl::StatusOr<int32_t> DaemonOf(v1::Role role, int64_t rank) const;

 private:
  absl::flat_hash_map<RankKey, int32_t> daemons_;  // looked up twice per transfer
  absl::flat_hash_map<RankKey, int32_t> devices_;
  int32_t default_daemon_ = -1;
};

}  // namespace refit::transport

#endif  // REFIT_TRANSPORT_RANK_PLACEMENT_H_

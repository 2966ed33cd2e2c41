// What each daemon of an epoch is sent ahead of it: its slice of the plan (v1::PlanSlice:
// its own transfers, the group's peers and placement, the NCCL group, the destinations it
// may write straight into, the views it quantizes and the views it hashes). A daemon keeps
// its slice across epochs: SlicesSent remembers, per daemon, the control session its last
// slice went to and what that slice held, so a slice is sent again only when the plan, the
// group or the daemon's session changed. Pure: no threads, no locks, no I/O.
//
// Threading: SlicesSent has none of its own and is not thread-safe; the holder of the
// refit group (EpochRunner's run_mu_) calls it.
#ifndef REFIT_COORDINATOR_PLAN_SLICES_H_
#define REFIT_COORDINATOR_PLAN_SLICES_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "coordinator/cluster.h"
#include "proto/refit.pb.h"
#include "transport/rank_key.h"
#include "transport/rank_placement.h"

namespace refit::daemon {

// What every daemon's slice of `plan` holds besides its own transfers, as one string: two
// epochs with equal keys send every daemon the same slice. It names the plan, each peer's
// data-plane address and shared-memory domain, the registrations of the destinations
// written straight into (a rank registered anew may have new segments), the placement, the
// NCCL group's id, and what is quantized where (the plan, in codes, does not show it).
std::string SliceKey(const ClusterSnapshot& snapshot, const v1::Plan& plan,
                     const std::optional<v1::NcclSetup>& nccl);

// Daemon `index`'s slice of `plan`: its transfers (transport::SlicePlan), every peer and
// placement, the NCCL group, its shared destinations, the quantized views on its ranks,
// and of `compared` (coordinator/view_checksums.h ComparedViews) the views on its ranks.
v1::CoordinatorMessage SliceFor(const ClusterSnapshot& snapshot, const v1::Plan& plan,
                                const transport::RankPlacement& where, int32_t index,
                                const std::optional<v1::NcclSetup>& nccl,
                                const transport::ViewKeySet& compared);

class SlicesSent {
 public:
  // Whether daemon `index`, in the session `channel`, lacks the slice of key `key`.
  bool Lacks(int32_t index, const std::shared_ptr<DaemonChannel>& channel,
             const std::string& key) const;
  // The slice of `key` went to daemon `index` in the session `channel`.
  void Sent(int32_t index, const std::shared_ptr<DaemonChannel>& channel, const std::string& key);
  // Daemon `index` holds no slice known (a send to it failed).
  void Forget(int32_t index);

 private:
  std::map<int32_t, std::pair<std::weak_ptr<DaemonChannel>, std::string>> sent_;
};

}  // namespace refit::daemon

#endif  // REFIT_COORDINATOR_PLAN_SLICES_H_

#include "coordinator/plan_slices.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "coordinator/shared_destinations.h"
#include "transport/plan_slice.h"

namespace refit::daemon {

std::string SliceKey(const ClusterSnapshot& snapshot, const v1::Plan& plan,
                     const std::optional<v1::NcclSetup>& nccl) {
  std::string key = plan.digest();
  for (const v1::DaemonPeer& peer : snapshot.daemons) {
    absl::StrAppend(&key, "|", peer.index(), "@", absl::CHexEscape(peer.data_plane_address()), "#",
                    absl::CHexEscape(peer.shared_memory_domain()));
  }
  for (const auto& [rank, layout] : snapshot.shared_destinations) {
    absl::StrAppend(&key, "|shared ", rank, "#", snapshot.destination_registrations.at(rank));
  }
  for (const v1::RankPlacement& p : snapshot.placement) {
    absl::StrAppend(&key, "|", p.role(), ":", p.rank(), ">", p.daemon(), ":", p.device());
  }
  if (nccl.has_value()) absl::StrAppend(&key, "|nccl ", absl::CHexEscape(nccl->unique_id()));
  for (const v1::QuantizedSource& q : snapshot.quantized_sources) {
    absl::StrAppend(&key, "|q", q.rank(), ":", q.view(), ":", q.source_dtype());
  }
  for (const v1::QuantizedSource& q : snapshot.quantized_on_arrival) {
    absl::StrAppend(&key, "|a", q.rank(), ":", q.view(), ":", q.scale_view(), ":",
                    q.source_dtype());
  }
  return key;
}

v1::CoordinatorMessage SliceFor(const ClusterSnapshot& snapshot, const v1::Plan& plan,
                                const transport::RankPlacement& where, int32_t index,
                                const std::optional<v1::NcclSetup>& nccl,
                                const transport::ViewKeySet& compared) {
  auto on_this_daemon = [&](v1::Role role, int64_t rank) {
    absl::StatusOr<int32_t> daemon = where.DaemonOf(role, rank);
    return daemon.ok() && *daemon == index;
  };
  v1::CoordinatorMessage message;
  v1::PlanSlice* slice = message.mutable_plan();
  slice->set_digest(plan.digest());
  *slice->mutable_plan() = transport::SlicePlan(plan, where, index);
  slice->set_daemon_index(index);
  for (const v1::DaemonPeer& peer : snapshot.daemons) *slice->add_daemons() = peer;
  for (const v1::RankPlacement& p : snapshot.placement) *slice->add_placement() = p;
  if (nccl.has_value()) *slice->mutable_nccl() = *nccl;
  *slice->mutable_shared_destinations() = SharedDestinationsFor(snapshot, where, index);
  for (const v1::QuantizedSource& q : snapshot.quantized_sources) {
    if (on_this_daemon(v1::ROLE_SOURCE, q.rank())) *slice->add_quantized_sources() = q;
  }
  for (const v1::QuantizedSource& q : snapshot.quantized_on_arrival) {
    if (on_this_daemon(v1::ROLE_DESTINATION, q.rank())) *slice->add_quantized_on_arrival() = q;
  }
  // Only views another hashed view shares are compared: the daemon hashes just those.
  v1::ViewSelection* selection = slice->mutable_compared_views();
  for (const auto& [role, rank, view] : compared) {
    if (!on_this_daemon(static_cast<v1::Role>(role), rank)) continue;
    v1::ViewKey* key = selection->add_views();
    key->set_role(static_cast<v1::Role>(role));
    key->set_rank(rank);
    key->set_view(view);
  }
  return message;
}

bool SlicesSent::Lacks(int32_t index, const std::shared_ptr<DaemonChannel>& channel,
                       const std::string& key) const {
  auto it = sent_.find(index);
  return it == sent_.end() || it->second.first.lock() != channel || it->second.second != key;
}

void SlicesSent::Sent(int32_t index, const std::shared_ptr<DaemonChannel>& channel,
                      const std::string& key) {
  sent_[index] = {channel, key};
}

void SlicesSent::Forget(int32_t index) { sent_.erase(index); }

}  // namespace refit::daemon

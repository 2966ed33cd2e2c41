#include "coordinator/shared_destinations.h"

#include <set>
#include <string>

namespace refit::daemon {

v1::LayoutSpec SharedDestinationsFor(const ClusterSnapshot& snapshot,
                                     const transport::RankPlacement& where, int32_t index) {
  v1::LayoutSpec shared;
  std::string domain;
  for (const v1::DaemonPeer& peer : snapshot.daemons) {
    if (peer.index() == index) domain = peer.shared_memory_domain();
  }
  if (domain.empty()) return shared;
  std::set<int32_t> same_domain;
  for (const v1::DaemonPeer& peer : snapshot.daemons) {
    if (peer.shared_memory_domain() == domain) same_domain.insert(peer.index());
  }
  std::set<std::string> tensors;
  for (const auto& [rank, layout] : snapshot.shared_destinations) {
    absl::StatusOr<int32_t> daemon = where.DaemonOf(v1::ROLE_DESTINATION, rank);
    if (!daemon.ok() || !same_domain.count(*daemon)) continue;
    *shared.add_ranks() = layout;
    for (const v1::ShardView& view : layout.views()) tensors.insert(view.tensor());
  }
  for (const v1::TensorSpec& tensor : snapshot.destinations.tensors()) {
    if (tensors.count(tensor.name())) *shared.add_tensors() = tensor;
  }
  return shared;
}

}  // namespace refit::daemon

#include "transport/peer_destinations.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "planner/dtype.h"

namespace refit::transport {

absl::Status PeerDestinations::Update(const v1::LayoutSpec& shared, const RankPlacement& placement,
                                      int32_t self) {
  TensorTable tensors;
  for (const v1::TensorSpec& t : shared.tensors()) {
    absl::StatusOr<int> bytes = planner::DtypeBytes(t.dtype());
    if (!bytes.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("shared destination tensor \"", t.name(), "\": ", bytes.status().message()));
    }
    tensors[t.name()] = TensorShape{*bytes, Dims(t.shape().begin(), t.shape().end())};
  }
  std::map<int64_t, const v1::RankLayout*> wanted;  // the peers' ranks listed
  ranks_.clear();
  for (const v1::RankLayout& layout : shared.ranks()) {
    ranks_.insert(layout.rank());
    absl::StatusOr<int32_t> daemon = placement.DaemonOf(v1::ROLE_DESTINATION, layout.rank());
    if (daemon.ok() && *daemon != self) wanted[layout.rank()] = &layout;
  }
  for (auto it = mapped_.begin(); it != mapped_.end();) {
    auto listed = wanted.find(it->first);
    if (listed != wanted.end() && listed->second->SerializeAsString() == it->second) {
      ++it;
      continue;
    }
    buffers_.RemoveRank(v1::ROLE_DESTINATION, it->first);
    it = mapped_.erase(it);
  }
  for (const auto& [rank, layout] : wanted) {
    if (mapped_.count(rank)) continue;
    if (absl::Status added = buffers_.AddRank(v1::ROLE_DESTINATION, *layout, &tensors);
        !added.ok()) {
      ranks_.clear();  // nothing goes straight until an Update succeeds
      return absl::Status(added.code(), absl::StrCat("mapping a same-host peer's destination rank ",
                                                     rank, ": ", added.message()));
    }
    mapped_[rank] = layout->SerializeAsString();
    ++mappings_;
  }
  return absl::OkStatus();
}

}  // namespace refit::transport

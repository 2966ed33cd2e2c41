#include "transport/peer_destinations.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "planner/dtype.h"

namespace refit::transport {

namespace {

absl::StatusOr<TensorTable> TensorsOf(const v1::LayoutSpec& spec) {
  TensorTable tensors;
  for (const v1::TensorSpec& t : spec.tensors()) {
    absl::StatusOr<int> bytes = planner::DtypeBytes(t.dtype());
    if (!bytes.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("shared destination tensor \"", t.name(), "\": ", bytes.status().message()));
    }
    tensors[t.name()] = TensorShape{*bytes, Dims(t.shape().begin(), t.shape().end())};
  }
  return tensors;
}

}  // namespace

absl::Status PeerDestinations::MapRank(const v1::RankLayout& layout, const TensorTable& tensors) {
  std::string serialized = layout.SerializeAsString();
  auto mapped = mapped_.find(layout.rank());
  if (mapped != mapped_.end()) {
    if (mapped->second == serialized) return absl::OkStatus();
    buffers_.RemoveRank(v1::ROLE_DESTINATION, layout.rank());
    mapped_.erase(mapped);
  }
  if (absl::Status added = buffers_.AddRank(v1::ROLE_DESTINATION, layout, &tensors); !added.ok()) {
    return absl::Status(added.code(), absl::StrCat("mapping a same-host peer's destination rank ",
                                                   layout.rank(), ": ", added.message()));
  }
  mapped_[layout.rank()] = std::move(serialized);
  ++mappings_;
  return absl::OkStatus();
}

absl::Status PeerDestinations::Prepare(const v1::LayoutSpec& others) {
  absl::StatusOr<TensorTable> tensors = TensorsOf(others);
  if (!tensors.ok()) return tensors.status();
  absl::Status first_error;
  for (const v1::RankLayout& layout : others.ranks()) first_error.Update(MapRank(layout, *tensors));
  return first_error;
}

absl::Status PeerDestinations::Update(const v1::LayoutSpec& shared, const RankPlacement& placement,
                                      int32_t self) {
  ranks_.clear();  // nothing goes straight until this succeeds
  absl::StatusOr<TensorTable> tensors = TensorsOf(shared);
  if (!tensors.ok()) return tensors.status();
  std::map<int64_t, const v1::RankLayout*> wanted;  // the peers' ranks listed
  for (const v1::RankLayout& layout : shared.ranks()) {
    absl::StatusOr<int32_t> daemon = placement.DaemonOf(v1::ROLE_DESTINATION, layout.rank());
    if (daemon.ok() && *daemon != self) wanted[layout.rank()] = &layout;
  }
  for (auto it = mapped_.begin(); it != mapped_.end();) {
    if (wanted.count(it->first)) {
      ++it;
      continue;
    }
    buffers_.RemoveRank(v1::ROLE_DESTINATION, it->first);
    it = mapped_.erase(it);
  }
  for (const auto& [rank, layout] : wanted) {
    if (absl::Status mapped = MapRank(*layout, *tensors); !mapped.ok()) return mapped;
  }
  for (const v1::RankLayout& layout : shared.ranks()) ranks_.insert(layout.rank());
  return absl::OkStatus();
}

}  // namespace refit::transport

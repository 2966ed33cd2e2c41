#include "transport/peer_destinations.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace refit::transport {

namespace {

// The tensors of `all` that `layout`'s views name: a rank declares only its own, so that a
// peer's rank of a changed model does not stand in the way of another's.
TensorTable OwnTensors(const TensorTable& all, const v1::RankLayout& layout) {
  TensorTable own;
  for (const v1::ShardView& view : layout.views()) {
    auto it = all.find(view.tensor());
    if (it != all.end()) own.emplace(it->first, it->second);
  }
  return own;
}

}  // namespace

bool PeerDestinations::MappedAsIs(const v1::RankLayout& layout) const {
  auto mapped = mapped_.find(layout.rank());
  return mapped != mapped_.end() && mapped->second == layout.SerializeAsString() &&
         buffers_.StillNamed(v1::ROLE_DESTINATION, layout.rank());
}

absl::Status PeerDestinations::MapAll(const std::map<int64_t, const v1::RankLayout*>& wanted,
                                      const v1::LayoutSpec& spec) {
  // Ranks no longer wanted, registered again (another layout, or new segments under the
  // same names) or of a changed model go first, so their tensors are forgotten before the
  // new layouts declare theirs.
  std::vector<const v1::RankLayout*> to_map;
  for (auto it = mapped_.begin(); it != mapped_.end();) {
    auto listed = wanted.find(it->first);
    if (listed != wanted.end() && MappedAsIs(*listed->second)) {
      ++it;
      continue;
    }
    buffers_.RemoveRank(v1::ROLE_DESTINATION, it->first);
    it = mapped_.erase(it);
  }
  for (const auto& [rank, layout] : wanted) {
    if (!mapped_.count(rank)) to_map.push_back(layout);
  }
  if (to_map.empty()) return absl::OkStatus();
  absl::StatusOr<TensorTable> tensors = TensorTableOf(spec);
  if (!tensors.ok()) {
    return absl::Status(tensors.status().code(), absl::StrCat("a same-host peer's destination ",
                                                              tensors.status().message()));
  }
  absl::Status first_error;
  for (const v1::RankLayout* layout : to_map) {
    const TensorTable own = OwnTensors(*tensors, *layout);
    absl::Status added = buffers_.AddRank(v1::ROLE_DESTINATION, *layout, &own);
    if (!added.ok()) {
      first_error.Update(
          absl::Status(added.code(), absl::StrCat("mapping a same-host peer's destination rank ",
                                                  layout->rank(), ": ", added.message())));
      continue;
    }
    mapped_[layout->rank()] = layout->SerializeAsString();
    ++mappings_;
  }
  return first_error;
}

absl::Status PeerDestinations::Prepare(const v1::LayoutSpec& others) {
  std::map<int64_t, const v1::RankLayout*> wanted;
  for (const v1::RankLayout& layout : others.ranks()) wanted[layout.rank()] = &layout;
  return MapAll(wanted, others);
}

absl::Status PeerDestinations::Update(const v1::LayoutSpec& shared, const RankPlacement& placement,
                                      int32_t self) {
  ranks_.clear();                                   // nothing goes straight until this succeeds
  std::map<int64_t, const v1::RankLayout*> wanted;  // the peers' ranks listed
  for (const v1::RankLayout& layout : shared.ranks()) {
    absl::StatusOr<int32_t> daemon = placement.DaemonOf(v1::ROLE_DESTINATION, layout.rank());
    if (daemon.ok() && *daemon != self) wanted[layout.rank()] = &layout;
  }
  if (absl::Status mapped = MapAll(wanted, shared); !mapped.ok()) return mapped;
  ranks_ = Listed(shared);
  return absl::OkStatus();
}

std::set<int64_t> PeerDestinations::Listed(const v1::LayoutSpec& shared) {
  std::set<int64_t> listed;
  for (const v1::RankLayout& layout : shared.ranks()) listed.insert(layout.rank());
  return listed;
}

}  // namespace refit::transport

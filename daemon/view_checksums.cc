#include "daemon/view_checksums.h"

#include <map>
#include <string>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "transport/memory_fault_guard.h"
#include "transport/strided_copy.h"
#include "xxhash.h"

namespace refit::daemon {
namespace {

struct ViewRef {
  v1::Role role;
  int64_t rank;
  int32_t view;
};

// The box a view holds, as a printable key.
std::string BoxOf(const v1::ShardView& view) {
  return absl::StrCat(view.tensor(), " [", absl::StrJoin(view.offset(), ","), "] + [",
                      absl::StrJoin(view.extent(), ","), "]");
}

std::string Describe(const ViewRef& v) {
  return absl::StrCat(v.role == v1::ROLE_SOURCE ? "source" : "destination", " rank ", v.rank,
                      " view ", v.view);
}

}  // namespace

namespace {

// The memory of view `v` of registration `r`, and the view's extent.
absl::StatusOr<transport::ConstStridedRef> LocateView(const v1::RankRegistration& r, int v,
                                                      const transport::BufferMap& buffers,
                                                      transport::Dims* extent) {
  const v1::ShardView& view = r.layout().views(v);
  const transport::Dims offset(view.offset().begin(), view.offset().end());
  extent->assign(view.extent().begin(), view.extent().end());
  return buffers.Locate(r.role(), r.layout().rank(), v, view.tensor(), offset, *extent);
}

}  // namespace

absl::StatusOr<std::vector<v1::ViewChecksum>> ChecksumViews(
    const std::vector<v1::RankRegistration>& registrations, const transport::BufferMap& buffers,
    const ViewKeySet* only, const std::atomic<bool>* stop) {
  std::vector<v1::ViewChecksum> out;
  for (const v1::RankRegistration& r : registrations) {
    // A bucketed rank's bytes are gone into its process; its pieces were hashed on the way.
    if (r.layout().bucketed()) continue;
    for (int v = 0; v < r.layout().views_size(); ++v) {
      if (only != nullptr && !only->count({r.role(), r.layout().rank(), v})) continue;
      if (stop != nullptr && *stop) return absl::CancelledError("view checksums stopped");
      const v1::ShardView& view = r.layout().views(v);
      transport::Dims extent;
      absl::StatusOr<transport::ConstStridedRef> memory = LocateView(r, v, buffers, &extent);
      if (!memory.ok()) return memory.status();
      if (memory->device >= 0) continue;  // GPU views: no device-side hash yet
      if (transport::HoldsNothing(extent)) continue;
      uint64_t hash = 0;
      absl::Status hashed = transport::GuardMemoryAccess(
          absl::StrCat("hashing view ", v, " of rank ", r.layout().rank()), [&] {
            hash = transport::HashBox(extent, buffers.tensors().at(view.tensor()).element_bytes,
                                      *memory);
          });
      if (!hashed.ok()) return hashed;
      v1::ViewChecksum& checksum = out.emplace_back();
      checksum.set_role(r.role());
      checksum.set_rank(r.layout().rank());
      checksum.set_view(v);
      checksum.set_xxh64(hash);
    }
  }
  return out;
}

int64_t ViewChecksumBytes(const std::vector<v1::RankRegistration>& registrations,
                          const transport::BufferMap& buffers, const ViewKeySet* only) {
  int64_t bytes = 0;
  for (const v1::RankRegistration& r : registrations) {
    if (r.layout().bucketed()) continue;
    for (int v = 0; v < r.layout().views_size(); ++v) {
      if (only != nullptr && !only->count({r.role(), r.layout().rank(), v})) continue;
      const v1::ShardView& view = r.layout().views(v);
      auto tensor = buffers.tensors().find(view.tensor());
      if (tensor == buffers.tensors().end()) continue;
      int64_t elements = 1;
      for (int64_t e : view.extent()) elements *= e;
      bytes += elements * tensor->second.element_bytes;
    }
  }
  return bytes;
}

absl::StatusOr<int64_t> CompareViewChecksums(const v1::LayoutSpec& sources,
                                             const v1::LayoutSpec& destinations,
                                             const std::vector<v1::ViewChecksum>& checksums) {
  // (role, rank, view) -> the box it holds, as a printable key.
  std::map<std::tuple<int, int64_t, int32_t>, std::string> box_of;
  for (auto [spec, role] :
       {std::pair{&sources, v1::ROLE_SOURCE}, std::pair{&destinations, v1::ROLE_DESTINATION}}) {
    for (const v1::RankLayout& r : spec->ranks()) {
      for (int v = 0; v < r.views_size(); ++v) {
        box_of[{role, r.rank(), v}] = BoxOf(r.views(v));
      }
    }
  }
  struct Group {
    std::map<uint64_t, std::vector<ViewRef>> by_hash;
    uint64_t source_hash = 0;
    bool has_source = false;
    int64_t views = 0;
  };
  std::map<std::string, Group> groups;
  for (const v1::ViewChecksum& c : checksums) {
    auto box = box_of.find({c.role(), c.rank(), c.view()});
    if (box == box_of.end()) continue;  // a rank that left: nothing to compare against
    Group& group = groups[box->second];
    group.by_hash[c.xxh64()].push_back(ViewRef{c.role(), c.rank(), c.view()});
    ++group.views;
    if (c.role() == v1::ROLE_SOURCE && !group.has_source) {
      group.has_source = true;
      group.source_hash = c.xxh64();
    }
  }
  int64_t compared = 0;
  for (const auto& [box, group] : groups) {
    if (group.views < 2) continue;
    compared += group.views;
    if (group.by_hash.size() == 1) continue;
    // The reference: what the (first) source holds, else what most copies hold.
    uint64_t reference = group.source_hash;
    if (!group.has_source) {
      size_t most = 0;
      for (const auto& [hash, views] : group.by_hash) {
        if (views.size() > most) most = views.size(), reference = hash;
      }
    }
    std::vector<std::string> wrong;
    for (const auto& [hash, views] : group.by_hash) {
      if (hash == reference) continue;
      for (const ViewRef& v : views)
        wrong.push_back(absl::StrFormat("%s (%016x)", Describe(v), hash));
    }
    return absl::DataLossError(absl::StrCat("checksum mismatch on ", box, ": ",
                                            absl::StrJoin(wrong, ", "), " differ from ",
                                            group.has_source ? "the source's" : "the other copies'",
                                            absl::StrFormat(" %016x", reference)));
  }
  return compared;
}

ViewKeySet SourceReplicaShare(const std::vector<v1::RankRegistration>& sources,
                              const ViewKeySet* only, uint32_t epoch_number, uint32_t every) {
  ViewKeySet share;
  for (const v1::RankRegistration& r : sources) {
    if (r.role() != v1::ROLE_SOURCE) continue;
    for (int v = 0; v < r.layout().views_size(); ++v) {
      const std::tuple<int, int64_t, int32_t> key{v1::ROLE_SOURCE, r.layout().rank(), v};
      if (only != nullptr && only->count(key) == 0) continue;
      const std::string& tensor = r.layout().views(v).tensor();
      if (every > 1 && XXH3_64bits(tensor.data(), tensor.size()) % every != epoch_number % every) {
        continue;
      }
      share.insert(key);
    }
  }
  return share;
}

ViewKeySet ComparedViews(const v1::LayoutSpec& sources, const v1::LayoutSpec& destinations,
                         bool destinations_hashed) {
  std::map<std::string, std::vector<std::tuple<int, int64_t, int32_t>>> holders;
  for (auto [spec, role] :
       {std::pair{&sources, v1::ROLE_SOURCE}, std::pair{&destinations, v1::ROLE_DESTINATION}}) {
    if (role == v1::ROLE_DESTINATION && !destinations_hashed) continue;
    for (const v1::RankLayout& r : spec->ranks()) {
      for (int v = 0; v < r.views_size(); ++v) {
        holders[BoxOf(r.views(v))].emplace_back(role, r.rank(), v);
      }
    }
  }
  ViewKeySet compared;
  for (const auto& [box, views] : holders) {
    if (views.size() > 1) compared.insert(views.begin(), views.end());
  }
  return compared;
}

}  // namespace refit::daemon

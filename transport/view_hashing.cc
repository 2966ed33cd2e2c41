#include "transport/view_hashing.h"

#include <string>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "transport/memory_fault_guard.h"
#include "transport/strided_copy.h"
#include "xxhash.h"

namespace refit::transport {
namespace {

// The memory of view `v` of registration `r`, and the view's extent.
absl::StatusOr<ConstStridedRef> LocateView(const v1::RankRegistration& r, int v,
                                           const BufferMap& buffers, Dims* extent) {
  const v1::ShardView& view = r.layout().views(v);
  const Dims offset(view.offset().begin(), view.offset().end());
  extent->assign(view.extent().begin(), view.extent().end());
  return buffers.Locate(r.role(), r.layout().rank(), v, view.tensor(), offset, *extent);
}

}  // namespace

absl::StatusOr<std::vector<v1::ViewChecksum>> ChecksumViews(
    const std::vector<v1::RankRegistration>& registrations, const BufferMap& buffers,
    const ViewKeySet* only, const Interrupt* stop) {
  std::vector<v1::ViewChecksum> out;
  for (const v1::RankRegistration& r : registrations) {
    // A bucketed rank's bytes are gone into its process; its pieces were hashed on the way.
    if (r.layout().bucketed()) continue;
    for (int v = 0; v < r.layout().views_size(); ++v) {
      if (only != nullptr && !only->count({r.role(), r.layout().rank(), v})) continue;
      if (stop != nullptr && stop->raised()) {
        return absl::CancelledError(absl::StrCat("view checksums stopped: ", stop->reason()));
      }
      const v1::ShardView& view = r.layout().views(v);
      Dims extent;
      absl::StatusOr<ConstStridedRef> memory = LocateView(r, v, buffers, &extent);
      if (!memory.ok()) return memory.status();
      if (memory->device >= 0) continue;  // GPU views: no device-side hash yet
      if (HoldsNothing(extent)) continue;
      uint64_t hash = 0;
      absl::Status hashed =
          GuardMemoryAccess(absl::StrCat("hashing view ", v, " of rank ", r.layout().rank()), [&] {
            hash = HashBox(extent, buffers.tensors().at(view.tensor()).element_bytes, *memory);
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
                          const BufferMap& buffers, const ViewKeySet* only) {
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

}  // namespace refit::transport

// The destination ranks of same-host peer daemons that this daemon writes straight into
// (PlanSlice's shared_destinations, PlanExecutor::WriteStraightInto), mapped here and kept
// across epochs: a rank is mapped when a slice first lists it, again only when it registered
// again (another layout, or new segments under the same names), and unmapped once a slice
// no longer lists it. Mapping prefaults every page (SharedMemorySegment::Open), so a warm epoch
// touches no fresh page of a peer's rank either.
#ifndef REFIT_TRANSPORT_PEER_DESTINATIONS_H_
#define REFIT_TRANSPORT_PEER_DESTINATIONS_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "proto/refit.pb.h"
#include "transport/buffer_map.h"
#include "transport/plan_executor.h"

namespace refit::transport {

class PeerDestinations {
 public:
  // Brings the map to `shared` (a slice's shared_destinations): its ranks that `placement`
  // puts on another daemon than `self` are mapped, the others forgotten. An error names
  // the rank and the segment; the epoch must not run then (its peers expect the pieces to
  // be written straight), and the ranks that did map stay mapped for the next one.
  absl::Status Update(const v1::LayoutSpec& shared, const RankPlacement& placement, int32_t self);

  // The same ahead of the epochs, for `others` (a coordinator's list of same-host peers'
  // destination ranks): leaves ranks() alone (the slice decides what goes straight). Not
  // while an epoch runs. An error names the first rank that could not be mapped.
  absl::Status Prepare(const v1::LayoutSpec& others);

  // Every rank the last Update listed, this daemon's own included: the list both ends of a
  // straight write decide from.
  const std::set<int64_t>& ranks() const { return ranks_; }
  // The ranks `shared` (a slice's shared_destinations) lists: what ranks() holds after an
  // Update of it succeeded.
  static std::set<int64_t> Listed(const v1::LayoutSpec& shared);
  BufferMap* buffers() { return &buffers_; }
  // How many times a rank was mapped (tests: a warm epoch maps nothing).
  int64_t mappings() const { return mappings_; }

 private:
  // Whether `layout` is mapped as it is: the same layout, and the same segments behind
  // its buffers' names (a rank registered again under the same names has new ones).
  bool MappedAsIs(const v1::RankLayout& layout) const;
  // Maps `wanted` (rank -> its layout, in `spec`), forgetting every other rank and every
  // rank not mapped as it is first; each rank declares only the tensors its views name.
  absl::Status MapAll(const std::map<int64_t, const v1::RankLayout*>& wanted,
                      const v1::LayoutSpec& spec);

  BufferMap buffers_;
  std::map<int64_t, std::string> mapped_;  // rank -> its layout as mapped, serialized
  std::set<int64_t> ranks_;
  int64_t mappings_ = 0;
};

}  // namespace refit::transport

#endif  // REFIT_TRANSPORT_PEER_DESTINATIONS_H_

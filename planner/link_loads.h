// Bytes per link of the cost model: every GPU has a NIC (in, out), NVLink (in, out) and a
// local copy engine. A transfer loads the links its route crosses.
#ifndef REFIT_PLANNER_LINK_LOADS_H_
#define REFIT_PLANNER_LINK_LOADS_H_

#include <cstdint>
#include <vector>

#include "planner/topology.h"
#include "proto/refit.pb.h"

namespace refit::planner {

enum LinkKind : int { kNicOut = 0, kNicIn, kNvlinkOut, kNvlinkIn, kLocalCopy, kNumLinkKinds };

// The links a transfer on `route` from GPU `src_gpu` to GPU `dst_gpu` loads, as indexes
// gpu * kNumLinkKinds + kind: the sender's out link and the receiver's in link over the
// network or NVLink, the receiver's copy engine alone for a local copy (second = -1).
struct RouteLinks {
  int32_t first = -1;
  int32_t second = -1;
};
RouteLinks LinksOf(v1::Route route, int32_t src_gpu, int32_t dst_gpu);

class LinkLoads {
 public:
  explicit LinkLoads(int32_t num_gpus) : bytes_(num_gpus * kNumLinkKinds, 0) {}

  void Add(v1::Route route, int32_t src_gpu, int32_t dst_gpu, int64_t bytes);
  int64_t At(int32_t gpu, LinkKind kind) const { return bytes_[gpu * kNumLinkKinds + kind]; }
  int32_t num_gpus() const { return static_cast<int32_t>(bytes_.size() / kNumLinkKinds); }
  // Seconds the busiest link needs at the given bandwidths.
  double BottleneckSeconds(const Bandwidths& bandwidths) const;
  // Largest byte count over NIC and NVLink links, and the mean over the busy links of
  // that link's kind (NIC out, NIC in, NVLink out or NVLink in).
  int64_t MaxLinkBytes() const;
  double MeanBusyLinkBytes() const;

 private:
  std::vector<int64_t> bytes_;
};

double LinkBandwidth(LinkKind kind, const Bandwidths& bandwidths);

}  // namespace refit::planner

#endif  // REFIT_PLANNER_LINK_LOADS_H_

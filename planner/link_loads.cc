#include "planner/link_loads.h"

#include <algorithm>

namespace refit::planner {

double LinkBandwidth(LinkKind kind, const Bandwidths& bandwidths) {
  switch (kind) {
    case kNicOut:
    case kNicIn:
      return bandwidths.nic_bytes_per_s;
    case kNvlinkOut:
    case kNvlinkIn:
      return bandwidths.nvlink_bytes_per_s;
    default:
      return bandwidths.local_copy_bytes_per_s;
  }
}

RouteLinks LinksOf(v1::Route route, int32_t src_gpu, int32_t dst_gpu) {
  switch (route) {
    case v1::ROUTE_NETWORK:
      return {src_gpu * kNumLinkKinds + kNicOut, dst_gpu * kNumLinkKinds + kNicIn};
    case v1::ROUTE_NVLINK:
      return {src_gpu * kNumLinkKinds + kNvlinkOut, dst_gpu * kNumLinkKinds + kNvlinkIn};
    default:
      return {dst_gpu * kNumLinkKinds + kLocalCopy, -1};
  }
}

void LinkLoads::Add(v1::Route route, int32_t src_gpu, int32_t dst_gpu, int64_t bytes) {
  const RouteLinks links = LinksOf(route, src_gpu, dst_gpu);
  for (int32_t link : {links.first, links.second}) {
    if (link >= 0) bytes_[link] += bytes;
  }
}

double LinkLoads::BottleneckSeconds(const Bandwidths& bandwidths) const {
  double worst = 0;
  for (size_t i = 0; i < bytes_.size(); ++i) {
    const LinkKind kind = static_cast<LinkKind>(i % kNumLinkKinds);
    worst = std::max(worst, bytes_[i] / LinkBandwidth(kind, bandwidths));
  }
  return worst;
}

int64_t LinkLoads::MaxLinkBytes() const {
  int64_t worst = 0;
  for (size_t i = 0; i < bytes_.size(); ++i) {
    if (i % kNumLinkKinds == kLocalCopy) continue;
    worst = std::max(worst, bytes_[i]);
  }
  return worst;
}

double LinkLoads::MeanBusyLinkBytes() const {
  // Over the links of the busiest link's kind, so NIC balance is not diluted by NVLink.
  int64_t worst = -1;
  size_t worst_kind = kNicOut;
  for (size_t i = 0; i < bytes_.size(); ++i) {
    if (i % kNumLinkKinds == kLocalCopy || bytes_[i] <= worst) continue;
    worst = bytes_[i];
    worst_kind = i % kNumLinkKinds;
  }
  double sum = 0;
  int64_t busy = 0;
  for (size_t i = worst_kind; i < bytes_.size(); i += kNumLinkKinds) {
    if (bytes_[i] == 0) continue;
    sum += bytes_[i];
    ++busy;
  }
  return busy == 0 ? 0 : sum / busy;
}

}  // namespace refit::planner

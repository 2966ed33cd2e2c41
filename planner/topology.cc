#include "planner/topology.h"

#include "absl/strings/str_cat.h"

namespace refit::planner {

ClusterMap::ClusterMap(const v1::Topology& topology, const Layout& sources,
                       const Layout& destinations) {
  if (topology.nvlink_gbytes_per_s() > 0)
    bandwidths_.nvlink_bytes_per_s = topology.nvlink_gbytes_per_s() * 1e9;
  if (topology.nic_gbytes_per_s() > 0)
    bandwidths_.nic_bytes_per_s = topology.nic_gbytes_per_s() * 1e9;
  if (topology.local_copy_gbytes_per_s() > 0)
    bandwidths_.local_copy_bytes_per_s = topology.local_copy_gbytes_per_s() * 1e9;
  if (topology.message_latency_us() > 0)
    bandwidths_.message_latency_s = topology.message_latency_us() * 1e-6;
  if (topology.batch_latency_us() > 0)
    bandwidths_.batch_latency_s = topology.batch_latency_us() * 1e-6;
  for (const v1::HostPlacement& placement : topology.hosts()) {
    if (placement.nvlink_domain().empty()) continue;
    auto [it, inserted] = domain_by_name_.emplace(
        absl::StrCat("domain:", placement.nvlink_domain()), domain_gpus_.size());
    if (inserted) domain_gpus_.push_back(0);
    const int32_t domain = it->second;  // copied: the next emplace may rehash
    domain_by_name_.emplace(absl::StrCat("host:", placement.host()), domain);
  }
  for (const RankInfo& rank : sources.ranks) source_gpu_.push_back(GpuOf(rank.host, rank.device));
  for (const RankInfo& rank : destinations.ranks) {
    destination_gpu_.push_back(GpuOf(rank.host, rank.device));
  }
}

int32_t ClusterMap::GpuOf(const std::string& host, int32_t device) {
  auto [it, inserted] = gpu_by_key_.emplace(absl::StrCat(host, "\n", device), gpu_domain_.size());
  if (!inserted) return it->second;
  auto [domain_it, new_domain] =
      domain_by_name_.emplace(absl::StrCat("host:", host), domain_gpus_.size());
  if (new_domain) domain_gpus_.push_back(0);
  gpu_domain_.push_back(domain_it->second);
  ++domain_gpus_[domain_it->second];
  return it->second;
}

v1::Route ClusterMap::RouteBetween(int32_t gpu_a, int32_t gpu_b) const {
  if (gpu_a == gpu_b) return v1::ROUTE_LOCAL;
  if (gpu_domain_[gpu_a] == gpu_domain_[gpu_b]) return v1::ROUTE_NVLINK;
  return v1::ROUTE_NETWORK;
}

v1::Topology DgxH100Topology() {
  v1::Topology topology;
  topology.set_name("dgx-h100");
  topology.set_nvlink_gbytes_per_s(450);
  topology.set_nic_gbytes_per_s(50);
  topology.set_local_copy_gbytes_per_s(1500);
  topology.set_message_latency_us(5);
  topology.set_batch_latency_us(20);
  return topology;
}

}  // namespace refit::planner

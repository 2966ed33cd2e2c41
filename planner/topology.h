// The cluster as the cost model sees it: GPUs identified by (host, device), grouped into
// NVLink domains, with per-GPU NIC and NVLink bandwidths (DGX H100 defaults).
#ifndef REFIT_PLANNER_TOPOLOGY_H_
#define REFIT_PLANNER_TOPOLOGY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "planner/layout.h"
#include "planner/plan.h"
#include "proto/refit.pb.h"

namespace refit::planner {

struct Bandwidths {
  double nvlink_bytes_per_s = 450e9;
  double nic_bytes_per_s = 50e9;
  double local_copy_bytes_per_s = 1500e9;
  double message_latency_s = 5e-6;
  double batch_latency_s = 20e-6;
};

// Every GPU that appears in the source or destination layout, with its NVLink domain.
class ClusterMap {
 public:
  ClusterMap(const v1::Topology& topology, const Layout& sources, const Layout& destinations);

  int32_t num_gpus() const { return static_cast<int32_t>(gpu_domain_.size()); }
  int32_t num_domains() const { return static_cast<int32_t>(domain_gpus_.size()); }
  int32_t SourceGpu(int32_t rank_index) const { return source_gpu_[rank_index]; }
  int32_t DestinationGpu(int32_t rank_index) const { return destination_gpu_[rank_index]; }
  // The GPU a plan endpoint lives on (source-side or destination-side rank).
  int32_t EndpointGpu(const Endpoint& endpoint) const {
    return endpoint.IsSourceSide() ? SourceGpu(endpoint.rank_index)
                                   : DestinationGpu(endpoint.rank_index);
  }
  int32_t DomainOf(int32_t gpu) const { return gpu_domain_[gpu]; }
  int32_t GpusInDomain(int32_t domain) const { return domain_gpus_[domain]; }
  v1::Route RouteBetween(int32_t gpu_a, int32_t gpu_b) const;
  const Bandwidths& bandwidths() const { return bandwidths_; }

 private:
  int32_t GpuOf(const std::string& host, int32_t device);

  Bandwidths bandwidths_;
  std::vector<int32_t> source_gpu_;
  std::vector<int32_t> destination_gpu_;
  std::vector<int32_t> gpu_domain_;
  std::vector<int32_t> domain_gpus_;
  absl::flat_hash_map<std::string, int32_t> gpu_by_key_;
  absl::flat_hash_map<std::string, int32_t> domain_by_name_;
};

// A DGX H100 topology description (8 GPUs per host, one NVLink domain per host).
v1::Topology DgxH100Topology();

}  // namespace refit::planner

#endif  // REFIT_PLANNER_TOPOLOGY_H_

#include "planner/lower_bound.h"

#include <algorithm>
#include <map>

#include "planner/link_loads.h"

namespace refit::planner {
namespace {

// Disjoint boxes whose union grows by Add; the volume of a union of boxes.
class BoxUnion {
 public:
  void Add(const Box& box) {
    std::vector<Box> fresh = {box}, next;
    for (const Box& have : boxes_) {
      next.clear();
      for (const Box& f : fresh) Subtract(f, have, &next);
      fresh.swap(next);
      if (fresh.empty()) return;
    }
    boxes_.insert(boxes_.end(), fresh.begin(), fresh.end());
  }
  void Remove(const Box& box) {
    std::vector<Box> next;
    for (const Box& have : boxes_) Subtract(have, box, &next);
    boxes_.swap(next);
  }
  const std::vector<Box>& boxes() const { return boxes_; }
  int64_t Volume() const {
    int64_t v = 0;
    for (const Box& b : boxes_) v += b.Volume();
    return v;
  }

 private:
  std::vector<Box> boxes_;
};

}  // namespace

LowerBound ComputeLowerBound(const PlanningProblem& problem) {
  const ClusterMap& cluster = *problem.cluster;
  const Bandwidths& bw = cluster.bandwidths();
  const Layout& dst = *problem.destinations;
  std::vector<int64_t> domain_in(cluster.num_domains(), 0);
  std::vector<int64_t> domain_out(cluster.num_domains(), 0);
  std::vector<int64_t> gpu_ingress(cluster.num_gpus(), 0);

  // Destination boxes per (tensor, domain), in group order (groups are sorted by tensor).
  std::map<int32_t, BoxUnion> needed;  // domain -> union, for the current tensor
  std::vector<int32_t> candidates;
  int32_t current_tensor = -1;
  auto settle = [&]() {
    for (auto& [domain, boxes] : needed) {
      // Remove what sources inside the domain already hold.
      std::vector<Box> snapshot = boxes.boxes();
      for (const Box& box : snapshot) {
        candidates.clear();
        problem.index->Query(current_tensor, box, &candidates);
        for (int32_t g : candidates) {
          for (int32_t h : problem.source_groups[g].views) {
            if (cluster.DomainOf(problem.SourceGpuOfView(h)) == domain) {
              boxes.Remove(problem.source_groups[g].box);
              break;
            }
          }
        }
      }
      domain_in[domain] += boxes.Volume() * dst.tensors[current_tensor].element_bytes;
    }
    needed.clear();
  };
  std::vector<int32_t> holder_domains;
  for (int32_t g = 0; g < static_cast<int32_t>(problem.destination_groups.size()); ++g) {
    const ViewGroup& group = problem.destination_groups[g];
    if (group.tensor != current_tensor) {
      if (current_tensor >= 0) settle();
      current_tensor = group.tensor;
    }
    const int element_bytes = dst.tensors[group.tensor].element_bytes;
    const absl::Span<const DomainMembers> runs = problem.RunsOf(g);
    for (const DomainMembers& run : runs) needed[run.domain].Add(group.box);

    for (const CoverPiece& piece : problem.destination_cover[g]) {
      const int64_t bytes = BoxBytes(piece.box, element_bytes);
      const std::vector<int32_t>& holders = problem.source_groups[piece.source_group].views;
      holder_domains.clear();
      for (int32_t h : holders) {
        holder_domains.push_back(cluster.DomainOf(problem.SourceGpuOfView(h)));
      }
      std::sort(holder_domains.begin(), holder_domains.end());
      holder_domains.erase(std::unique(holder_domains.begin(), holder_domains.end()),
                           holder_domains.end());
      for (const DomainMembers& run : runs) {
        const bool domain_holds =
            std::binary_search(holder_domains.begin(), holder_domains.end(), run.domain);
        // Bytes only one domain holds must leave it for every other domain needing them.
        if (holder_domains.size() == 1 && !domain_holds) domain_out[holder_domains[0]] += bytes;
        for (int32_t v : problem.MembersOf(run)) {
          const int32_t gpu = problem.DestinationGpuOfView(v);
          bool held_here = false;
          if (domain_holds) {
            for (int32_t h : holders) held_here |= problem.SourceGpuOfView(h) == gpu;
          }
          if (!held_here) gpu_ingress[gpu] += bytes;
        }
      }
    }
  }
  if (current_tensor >= 0) settle();

  LowerBound bound;
  for (int32_t d = 0; d < cluster.num_domains(); ++d) {
    bound.network_bytes += domain_in[d];
    const double nics = cluster.GpusInDomain(d) * bw.nic_bytes_per_s;
    bound.seconds = std::max(bound.seconds, domain_in[d] / nics);
    bound.seconds = std::max(bound.seconds, domain_out[d] / nics);
  }
  for (int32_t gpu = 0; gpu < cluster.num_gpus(); ++gpu) {
    bound.seconds =
        std::max(bound.seconds, gpu_ingress[gpu] / (bw.nic_bytes_per_s + bw.nvlink_bytes_per_s));
  }
  return bound;
}

}  // namespace refit::planner

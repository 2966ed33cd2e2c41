#include "planner/lower_bound.h"

#include <algorithm>
#include <map>

#include "absl/container/flat_hash_map.h"

#include "planner/link_loads.h"
#include "planner/overlap_index.h"

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

// Bytes of a tensor that reach one place, counted once: boxes known to be disjoint are
// summed as they come, the others united when the tensor is done.
class Tally {
 public:
  void Add(const Box& box, int64_t bytes, bool may_overlap) {
    if (sum_ == 0 && boxes_.empty()) touched_ = true;
    if (may_overlap) {
      boxes_.push_back(box);
    } else {
      sum_ += bytes;
    }
  }
  // The bytes counted, and empty again.
  int64_t Take(int element_bytes) {
    int64_t bytes = sum_;
    if (!boxes_.empty()) {
      BoxUnion united;
      for (const Box& box : boxes_) united.Add(box);
      bytes += united.Volume() * element_bytes;
    }
    sum_ = 0;
    boxes_.clear();
    touched_ = false;
    return bytes;
  }
  bool touched() const { return touched_; }

 private:
  int64_t sum_ = 0;
  std::vector<Box> boxes_;
  bool touched_ = false;
};

// Per tensor: whether its groups are pairwise disjoint (no region in two groups).
std::vector<bool> DisjointGroups(const std::vector<ViewGroup>& groups, const OverlapIndex& index,
                                 size_t num_tensors) {
  std::vector<bool> disjoint(num_tensors, true);
  std::vector<int32_t> candidates;
  for (int32_t g = 0; g < static_cast<int32_t>(groups.size()); ++g) {
    if (!disjoint[groups[g].tensor]) continue;
    candidates.clear();
    index.Query(groups[g].tensor, groups[g].box, &candidates);
    for (int32_t other : candidates) {
      if (other != g && Intersect(groups[g].box, groups[other].box).Volume() > 0) {
        disjoint[groups[g].tensor] = false;
        break;
      }
    }
  }
  return disjoint;
}

// Whether two members of `group` (replicas of its box) sit on one GPU.
bool SharesAGpu(const PlanningProblem& problem, const ViewGroup& group) {
  std::vector<int32_t> gpus;
  for (int32_t v : group.views) gpus.push_back(problem.DestinationGpuOfView(v));
  std::sort(gpus.begin(), gpus.end());
  return std::adjacent_find(gpus.begin(), gpus.end()) != gpus.end();
}

// What of `box` (of `tensor`) no source view for which `excluded` is true holds: the
// overlap index finds every source group that holds part of it, not only the one the
// cover chose.
template <typename Excluded>
void WithoutHeldBy(const PlanningProblem& problem, int32_t tensor, const Box& box,
                   Excluded excluded, std::vector<int32_t>* candidates, std::vector<Box>* out) {
  out->assign(1, box);
  candidates->clear();
  problem.index->Query(tensor, box, candidates);
  std::vector<Box> next;
  for (int32_t g : *candidates) {
    const ViewGroup& group = problem.source_groups[g];
    if (std::none_of(group.views.begin(), group.views.end(), excluded)) continue;
    next.clear();
    for (const Box& b : *out) Subtract(b, group.box, &next);
    out->swap(next);
    if (out->empty()) return;
  }
}

// What some source GPU's NIC must send without relays, where every byte leaves a GPU that
// holds it once for every domain that needs it and holds none of it: `demand[g]` is what
// the holders of source group g must send. A single holder's GPU sends all of its groups'
// demand; a set of GPUs sends at least the demand of every group held only inside it, so
// its busiest NIC at least that over the set's size.
double SourceGpuNicOutSeconds(const PlanningProblem& problem, const std::vector<int64_t>& demand) {
  const ClusterMap& cluster = *problem.cluster;
  std::vector<int64_t> single(cluster.num_gpus(), 0);
  absl::flat_hash_map<std::vector<int32_t>, int64_t> by_set;  // sorted GPUs -> demand
  std::vector<int32_t> gpus;
  for (size_t g = 0; g < demand.size(); ++g) {
    if (demand[g] == 0) continue;
    gpus.clear();
    for (int32_t h : problem.source_groups[g].views) gpus.push_back(problem.SourceGpuOfView(h));
    std::sort(gpus.begin(), gpus.end());
    gpus.erase(std::unique(gpus.begin(), gpus.end()), gpus.end());
    if (gpus.size() == 1) {
      single[gpus[0]] += demand[g];
    } else {
      by_set[gpus] += demand[g];
    }
  }
  int64_t busiest = *std::max_element(single.begin(), single.end());
  double busiest_share = static_cast<double>(busiest);
  // Sets inside other sets are added to them where there are few enough to compare pairwise.
  constexpr size_t kMostSetsCompared = 512;
  const bool nest = by_set.size() <= kMostSetsCompared;
  for (const auto& [set, bytes] : by_set) {
    int64_t inside = bytes;
    for (int32_t gpu : set) inside += single[gpu];
    if (nest) {
      for (const auto& [other, other_bytes] : by_set) {
        if (other.size() < set.size() &&
            std::includes(set.begin(), set.end(), other.begin(), other.end())) {
          inside += other_bytes;
        }
      }
    }
    busiest_share = std::max(busiest_share, static_cast<double>(inside) / set.size());
  }
  return busiest_share / cluster.bandwidths().nic_bytes_per_s;
}

}  // namespace

LowerBound ComputeLowerBound(const PlanningProblem& problem) {
  const ClusterMap& cluster = *problem.cluster;
  const Bandwidths& bw = cluster.bandwidths();
  const Layout& dst = *problem.destinations;
  std::vector<int64_t> domain_in(cluster.num_domains(), 0);
  std::vector<int64_t> domain_out(cluster.num_domains(), 0);
  std::vector<int64_t> domain_out_direct(cluster.num_domains(), 0);
  std::vector<int64_t> gpu_ingress(cluster.num_gpus(), 0);
  // Per source group, what its holders send without relays (SourceGpuNicOutSeconds).
  std::vector<int64_t> direct_demand(problem.source_groups.size(), 0);

  // Where a tensor's groups are disjoint, so are the pieces of any two of them: counted
  // without uniting. Otherwise (replicas tiled differently) they are united.
  const std::vector<bool> sources_disjoint =
      DisjointGroups(problem.source_groups, *problem.index, dst.tensors.size());
  const OverlapIndex destination_index(problem.destination_groups,
                                       static_cast<int32_t>(dst.tensors.size()));
  const std::vector<bool> destinations_disjoint =
      DisjointGroups(problem.destination_groups, destination_index, dst.tensors.size());
  std::vector<bool> gpu_holds_sources(cluster.num_gpus(), false);
  for (const ViewInfo& view : problem.sources->views) {
    gpu_holds_sources[cluster.SourceGpu(view.rank_index)] = true;
  }
  // For the current tensor (groups are sorted by tensor):
  //  - per destination domain, the boxes it needs;
  //  - per source domain, what only it holds and another domain needs: that must leave
  //    it at least once, and once may be enough (the others can forward it);
  //  - per destination GPU, what it writes and does not hold.
  std::map<int32_t, BoxUnion> needed;
  std::vector<Tally> leaving(cluster.num_domains());
  std::vector<Tally> arriving(cluster.num_gpus());
  std::vector<int32_t> touched_domains, touched_gpus;
  std::vector<int32_t> candidates;
  int32_t current_tensor = -1;
  auto settle = [&]() {
    const int element_bytes = dst.tensors[current_tensor].element_bytes;
    for (auto& [domain, boxes] : needed) {
      // In a domain without sources of the tensor, no source holds any of it.
      if (!problem.SourcesOfTensorIn(current_tensor, domain)) {
        domain_in[domain] += boxes.Volume() * element_bytes;
        continue;
      }
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
      domain_in[domain] += boxes.Volume() * element_bytes;
    }
    for (int32_t domain : touched_domains)
      domain_out[domain] += leaving[domain].Take(element_bytes);
    for (int32_t gpu : touched_gpus) gpu_ingress[gpu] += arriving[gpu].Take(element_bytes);
    needed.clear();
    touched_domains.clear();
    touched_gpus.clear();
  };

  std::vector<int32_t> holder_domains, member_gpus;
  std::vector<Box> fresh;
  for (int32_t g = 0; g < static_cast<int32_t>(problem.destination_groups.size()); ++g) {
    const ViewGroup& group = problem.destination_groups[g];
    if (group.tensor != current_tensor) {
      if (current_tensor >= 0) settle();
      current_tensor = group.tensor;
    }
    const int element_bytes = dst.tensors[group.tensor].element_bytes;
    const bool may_overlap = !destinations_disjoint[group.tensor];
    const bool sources_overlap = !sources_disjoint[group.tensor];
    auto leave = [&](int32_t domain, const Box& box) {
      if (!leaving[domain].touched()) touched_domains.push_back(domain);
      leaving[domain].Add(box, BoxBytes(box, element_bytes), may_overlap);
    };
    auto arrive = [&](int32_t gpu, const Box& box) {
      if (!arriving[gpu].touched()) touched_gpus.push_back(gpu);
      arriving[gpu].Add(box, BoxBytes(box, element_bytes), may_overlap);
    };
    const absl::Span<const DomainMembers> runs = problem.RunsOf(g);
    for (const DomainMembers& run : runs) needed[run.domain].Add(group.box);
    // Members on one GPU (replicas of one box) share what arrives once.
    const bool shares_a_gpu = SharesAGpu(problem, group);

    for (const CoverPiece& piece : problem.destination_cover[g]) {
      const std::vector<int32_t>& holders = problem.source_groups[piece.source_group].views;
      holder_domains.clear();
      for (int32_t h : holders) {
        holder_domains.push_back(cluster.DomainOf(problem.SourceGpuOfView(h)));
      }
      std::sort(holder_domains.begin(), holder_domains.end());
      holder_domains.erase(std::unique(holder_domains.begin(), holder_domains.end()),
                           holder_domains.end());
      if (holder_domains.size() == 1 &&
          std::any_of(runs.begin(), runs.end(),
                      [&](const DomainMembers& run) { return run.domain != holder_domains[0]; })) {
        const int32_t domain = holder_domains[0];
        if (!sources_overlap) {
          fresh.assign(1, piece.box);
        } else {  // what no other domain holds (another source group may hold part of it)
          WithoutHeldBy(
              problem, group.tensor, piece.box,
              [&](int32_t h) { return cluster.DomainOf(problem.SourceGpuOfView(h)) != domain; },
              &candidates, &fresh);
        }
        for (const Box& box : fresh) leave(domain, box);
        if (!may_overlap) {  // without relays: once per other domain that needs it
          int64_t fresh_bytes = 0;
          for (const Box& box : fresh) fresh_bytes += BoxBytes(box, element_bytes);
          for (const DomainMembers& run : runs) {
            if (run.domain != domain) domain_out_direct[domain] += fresh_bytes;
          }
        }
      }
      if (!sources_overlap && !may_overlap) {
        // Only its holders hold this piece: every domain that needs it and holds
        // none of it receives it over the network from one of them, without relays.
        int64_t domains = 0;
        for (const DomainMembers& run : runs) {
          domains += !std::binary_search(holder_domains.begin(), holder_domains.end(),
                                         run.domain);
        }
        direct_demand[piece.source_group] += domains * BoxBytes(piece.box, element_bytes);
      }
      auto arrive_at = [&](int32_t gpu) {
        if (!gpu_holds_sources[gpu]) {  // most GPUs: nothing to look up
          arrive(gpu, piece.box);
        } else if (!sources_overlap) {
          if (std::none_of(holders.begin(), holders.end(),
                           [&](int32_t h) { return problem.SourceGpuOfView(h) == gpu; })) {
            arrive(gpu, piece.box);
          }
        } else {
          WithoutHeldBy(
              problem, group.tensor, piece.box,
              [&](int32_t h) { return problem.SourceGpuOfView(h) == gpu; }, &candidates, &fresh);
          for (const Box& box : fresh) arrive(gpu, box);
        }
      };
      for (const DomainMembers& run : runs) {
        if (!shares_a_gpu) {
          for (int32_t v : problem.MembersOf(run)) arrive_at(problem.DestinationGpuOfView(v));
          continue;
        }
        member_gpus.clear();
        for (int32_t v : problem.MembersOf(run))
          member_gpus.push_back(problem.DestinationGpuOfView(v));
        std::sort(member_gpus.begin(), member_gpus.end());
        member_gpus.erase(std::unique(member_gpus.begin(), member_gpus.end()), member_gpus.end());
        for (int32_t gpu : member_gpus) arrive_at(gpu);
      }
    }
  }
  if (current_tensor >= 0) settle();

  LowerBound bound;
  for (int32_t d = 0; d < cluster.num_domains(); ++d) {
    bound.network_bytes += domain_in[d];
    const double nics = cluster.GpusInDomain(d) * bw.nic_bytes_per_s;
    bound.nic_in_seconds = std::max(bound.nic_in_seconds, domain_in[d] / nics);
    bound.seconds = std::max(bound.seconds, domain_in[d] / nics);
    bound.seconds = std::max(bound.seconds, domain_out[d] / nics);
    bound.direct_seconds = std::max(bound.direct_seconds, domain_out_direct[d] / nics);
  }
  for (int32_t gpu = 0; gpu < cluster.num_gpus(); ++gpu) {
    bound.seconds =
        std::max(bound.seconds, gpu_ingress[gpu] / (bw.nic_bytes_per_s + bw.nvlink_bytes_per_s));
  }
  bound.direct_seconds =
      std::max({bound.direct_seconds, bound.seconds, SourceGpuNicOutSeconds(problem, direct_demand)});
  return bound;
}

}  // namespace refit::planner

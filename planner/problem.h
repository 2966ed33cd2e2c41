// Everything both planning strategies start from: the two compiled layouts matched tensor
// by tensor, replicas grouped, the source overlap index, the cluster map, and the cover of
// every distinct destination box by source boxes (which is where coverage is validated).
#ifndef REFIT_PLANNER_PROBLEM_H_
#define REFIT_PLANNER_PROBLEM_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "planner/layout.h"
#include "planner/overlap_index.h"
#include "planner/source_groups.h"
#include "planner/topology.h"

namespace refit::planner {

// A region of a destination box assigned to one source group (all its replicas hold it).
struct CoverPiece {
  Box box;
  int32_t source_group = 0;
};

// The members of one destination group that sit in one NVLink domain.
struct DomainMembers {
  int32_t domain = 0;
  int32_t begin = 0;  // into PlanningProblem::members_by_domain
  int32_t end = 0;
};

struct PlanningProblem {
  const Layout* sources = nullptr;
  const Layout* destinations = nullptr;
  std::unique_ptr<ClusterMap> cluster;
  // Source tensor index -> destination tensor index (-1: the destinations do not need it).
  std::vector<int32_t> source_to_destination_tensor;
  std::vector<ViewGroup> source_groups;  // tensor ids are destination tensor ids
  std::unique_ptr<OverlapIndex> index;
  std::vector<ViewGroup> destination_groups;
  std::vector<std::vector<CoverPiece>> destination_cover;  // per destination group
  // Per destination group, its members split by NVLink domain (domains ascending):
  // group g owns domain_runs[run_begin[g] .. run_begin[g + 1]).
  std::vector<int32_t> members_by_domain;  // destination view indices
  std::vector<DomainMembers> domain_runs;
  std::vector<int32_t> run_begin;

  absl::Span<const DomainMembers> RunsOf(int32_t group) const {
    return absl::MakeConstSpan(domain_runs.data() + run_begin[group],
                               run_begin[group + 1] - run_begin[group]);
  }
  absl::Span<const int32_t> MembersOf(const DomainMembers& run) const {
    return absl::MakeConstSpan(members_by_domain.data() + run.begin, run.end - run.begin);
  }

  // Rank and GPU of every view, side by side: the planners look them up for every
  // transfer, and a view's full record (Layout::views) is a cache miss each time.
  std::vector<int32_t> source_view_rank, source_view_gpu;
  std::vector<int32_t> destination_view_rank, destination_view_gpu;

  // Per destination tensor, the NVLink domains where sources of it sit (sorted, unique).
  std::vector<std::vector<int32_t>> source_domains_of_tensor;
  bool SourcesOfTensorIn(int32_t tensor, int32_t domain) const {
    const std::vector<int32_t>& domains = source_domains_of_tensor[tensor];
    return std::binary_search(domains.begin(), domains.end(), domain);
  }

  int32_t SourceGpuOfView(int32_t view) const { return source_view_gpu[view]; }
  int32_t DestinationGpuOfView(int32_t view) const { return destination_view_gpu[view]; }
  int32_t SourceRankOfView(int32_t view) const { return source_view_rank[view]; }
  int32_t DestinationRankOfView(int32_t view) const { return destination_view_rank[view]; }
  // Whether a plan may read destination view `view` to forward what it holds: not on a
  // bucketed rank, whose bytes pass through a bucket and are gone.
  bool DestinationViewReadable(int32_t view) const {
    return !destinations->ranks[destination_view_rank[view]].bucketed;
  }
  bool any_bucketed_destination = false;
};

// Matches the sides (same tensors, dtypes and shapes), groups, indexes and covers. Errors
// name the tensor, the destination rank and the box that no source covers.
absl::StatusOr<std::unique_ptr<PlanningProblem>> MakePlanningProblem(const Layout& sources,
                                                                     const Layout& destinations,
                                                                     const v1::Topology& topology);

// Splits `box` of `tensor` among the overlapping source groups, each region going to the
// first group (in box order) that holds it. Returns what no source holds.
void CoverBox(const PlanningProblem& problem, int32_t tensor, const Box& box,
              std::vector<CoverPiece>* pieces, std::vector<Box>* uncovered);

}  // namespace refit::planner

#endif  // REFIT_PLANNER_PROBLEM_H_

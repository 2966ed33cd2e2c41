#include "planner/problem.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace refit::planner {
namespace {

// Splits every destination group's members by NVLink domain, once for all users.
void SplitMembersByDomain(PlanningProblem* problem) {
  std::vector<std::pair<int32_t, int32_t>> by_domain;  // (domain, view)
  problem->run_begin.push_back(0);
  for (const ViewGroup& group : problem->destination_groups) {
    by_domain.clear();
    for (int32_t v : group.views) {
      by_domain.push_back({problem->cluster->DomainOf(problem->DestinationGpuOfView(v)), v});
    }
    std::sort(by_domain.begin(), by_domain.end());
    for (size_t i = 0; i < by_domain.size(); ++i) {
      const int32_t at = problem->members_by_domain.size();
      if (i == 0 || by_domain[i].first != by_domain[i - 1].first) {
        problem->domain_runs.push_back(DomainMembers{by_domain[i].first, at, at});
      }
      problem->members_by_domain.push_back(by_domain[i].second);
      problem->domain_runs.back().end = at + 1;
    }
    problem->run_begin.push_back(problem->domain_runs.size());
  }
}

absl::Status MatchTensors(const Layout& sources, const Layout& destinations,
                          std::vector<int32_t>* source_to_destination) {
  source_to_destination->assign(sources.tensors.size(), -1);
  for (int32_t t = 0; t < static_cast<int32_t>(destinations.tensors.size()); ++t) {
    const TensorInfo& dst = destinations.tensors[t];
    auto it = sources.tensor_by_name.find(dst.name);
    if (it == sources.tensor_by_name.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(dst.name, ": the destinations declare this tensor but the sources do not"));
    }
    const TensorInfo& src = sources.tensors[it->second];
    if (src.dtype != dst.dtype || src.shape != dst.shape) {
      return absl::InvalidArgumentError(
          absl::StrCat(dst.name, ": destination dtype ", dst.dtype, " shape [",
                       absl::StrJoin(dst.shape, ", "), "] disagrees with source dtype ", src.dtype,
                       " shape [", absl::StrJoin(src.shape, ", "), "]"));
    }
    (*source_to_destination)[it->second] = t;
  }
  return absl::OkStatus();
}

}  // namespace

void CoverBox(const PlanningProblem& problem, int32_t tensor, const Box& box,
              std::vector<CoverPiece>* pieces, std::vector<Box>* uncovered) {
  std::vector<int32_t> candidates;
  problem.index->Query(tensor, box, &candidates);
  std::vector<Box> remaining = {box};
  std::vector<Box> next;
  for (int32_t g : candidates) {
    const Box& held = problem.source_groups[g].box;
    next.clear();
    for (const Box& part : remaining) {
      if (!Overlaps(part, held)) {
        next.push_back(part);
        continue;
      }
      Box piece = Intersect(part, held);
      // Coalesce with the previous region of this group when they touch.
      Box merged;
      if (!pieces->empty() && pieces->back().source_group == g &&
          TryMerge(pieces->back().box, piece, &merged)) {
        pieces->back().box = merged;
      } else {
        pieces->push_back(CoverPiece{std::move(piece), g});
      }
      Subtract(part, held, &next);
    }
    remaining.swap(next);
    if (remaining.empty()) break;
  }
  uncovered->insert(uncovered->end(), remaining.begin(), remaining.end());
}

absl::StatusOr<std::unique_ptr<PlanningProblem>> MakePlanningProblem(const Layout& sources,
                                                                     const Layout& destinations,
                                                                     const v1::Topology& topology) {
  auto problem = std::make_unique<PlanningProblem>();
  problem->sources = &sources;
  problem->destinations = &destinations;
  absl::Status matched =
      MatchTensors(sources, destinations, &problem->source_to_destination_tensor);
  if (!matched.ok()) return matched;
  problem->cluster = std::make_unique<ClusterMap>(topology, sources, destinations);
  for (const ViewInfo& view : sources.views) {
    problem->source_view_rank.push_back(view.rank_index);
    problem->source_view_gpu.push_back(problem->cluster->SourceGpu(view.rank_index));
  }
  for (const RankInfo& rank : destinations.ranks) {
    problem->any_bucketed_destination |= rank.bucketed;
  }
  for (const ViewInfo& view : destinations.views) {
    problem->destination_view_rank.push_back(view.rank_index);
    problem->destination_view_gpu.push_back(problem->cluster->DestinationGpu(view.rank_index));
  }
  problem->source_groups = GroupViews(sources, problem->source_to_destination_tensor);
  problem->index =
      std::make_unique<OverlapIndex>(problem->source_groups, destinations.tensors.size());
  problem->source_domains_of_tensor.resize(destinations.tensors.size());
  for (const ViewGroup& group : problem->source_groups) {
    for (int32_t v : group.views) {
      problem->source_domains_of_tensor[group.tensor].push_back(
          problem->cluster->DomainOf(problem->SourceGpuOfView(v)));
    }
  }
  for (std::vector<int32_t>& domains : problem->source_domains_of_tensor) {
    std::sort(domains.begin(), domains.end());
    domains.erase(std::unique(domains.begin(), domains.end()), domains.end());
  }
  std::vector<int32_t> identity(destinations.tensors.size());
  for (size_t t = 0; t < identity.size(); ++t) identity[t] = t;
  problem->destination_groups = GroupViews(destinations, identity);
  SplitMembersByDomain(problem.get());
  problem->destination_cover.resize(problem->destination_groups.size());
  std::vector<Box> uncovered;
  for (size_t g = 0; g < problem->destination_groups.size(); ++g) {
    const ViewGroup& group = problem->destination_groups[g];
    CoverBox(*problem, group.tensor, group.box, &problem->destination_cover[g], &uncovered);
    if (!uncovered.empty()) {
      const ViewInfo& view = destinations.views[group.views[0]];
      return absl::InvalidArgumentError(absl::StrCat(
          destinations.tensors[group.tensor].name, ": destination rank ",
          destinations.ranks[view.rank_index].rank, " box ", FormatBox(group.box),
          " is not covered by any source (uncovered part ", FormatBox(uncovered[0]), ")"));
    }
  }
  return problem;
}

}  // namespace refit::planner

#include "planner/reshard.h"

#include <algorithm>
#include <numeric>

#include "planner/batch_builder.h"
#include "planner/link_loads.h"

namespace refit::planner {
namespace {

struct WorkItem {
  int32_t piece = 0;
  int32_t source_group = 0;
  int32_t destination_group = 0;
};

// The dim along which a box can be cut into `parts`: the first one long enough.
size_t SplitDim(const Box& box, int64_t parts) {
  size_t best = 0;
  for (size_t d = 0; d < box.rank(); ++d) {
    if (box.extent[d] >= parts) return d;
    if (box.extent[d] > box.extent[best]) best = d;
  }
  return best;
}

class ReshardPlanner {
 public:
  ReshardPlanner(const PlanningProblem& problem, const PlanOptions& options, Plan* plan)
      : problem_(problem),
        options_(options),
        plan_(plan),
        cluster_(*problem.cluster),
        loads_(cluster_.num_gpus()) {}

  void Run() {
    MakePieces();
    std::vector<int32_t> order(work_.size());
    std::iota(order.begin(), order.end(), 0);
    // Largest pieces first onto the least loaded candidates.
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      return plan_->pieces[work_[a].piece].bytes > plan_->pieces[work_[b].piece].bytes;
    });
    for (int32_t w : order) Route(work_[w]);
    BatchBuilder batches(problem_.sources->ranks.size(), problem_.destinations->ranks.size(),
                         options_.staging_budget_bytes, cluster_.bandwidths());
    plan_->num_batches = batches.Assign(&plan_->transfers, depends_on_);
  }

 private:
  void MakePieces() {
    const Layout& dst = *problem_.destinations;
    for (int32_t g = 0; g < static_cast<int32_t>(problem_.destination_groups.size()); ++g) {
      const ViewGroup& group = problem_.destination_groups[g];
      const int element_bytes = dst.tensors[group.tensor].element_bytes;
      for (const CoverPiece& cover : problem_.destination_cover[g]) {
        const int64_t bytes = BoxBytes(cover.box, element_bytes);
        const int64_t holders = problem_.source_groups[cover.source_group].views.size();
        int64_t parts = 1;
        if (holders > 1 && bytes > options_.split_threshold_bytes) {
          parts = std::min(holders, (bytes + options_.split_threshold_bytes - 1) /
                                        options_.split_threshold_bytes);
        }
        const int64_t budget = std::max<int64_t>(1, options_.staging_budget_bytes);
        parts = std::max(parts, (bytes + budget - 1) / budget);
        if (parts == 1) {
          AddPiece(group.tensor, cover.box, bytes, cover.source_group, g);
          continue;
        }
        for (const Box& part : SplitAlong(cover.box, SplitDim(cover.box, parts), parts)) {
          AddPiece(group.tensor, part, BoxBytes(part, element_bytes), cover.source_group, g);
        }
      }
    }
  }

  void AddPiece(int32_t tensor, const Box& box, int64_t bytes, int32_t source_group,
                int32_t destination_group) {
    work_.push_back(WorkItem{static_cast<int32_t>(plan_->pieces.size()), source_group,
                             destination_group});
    plan_->pieces.push_back(Piece{tensor, box, bytes});
  }

  // Emits the transfers that bring one piece to every member of its destination group.
  void Route(const WorkItem& work) {
    const std::vector<int32_t>& holders = problem_.source_groups[work.source_group].views;
    const std::vector<int32_t>& members =
        problem_.destination_groups[work.destination_group].views;
    members_by_domain_.clear();
    for (int32_t member : members) {
      const int32_t gpu = problem_.DestinationGpuOfView(member);
      members_by_domain_.push_back({cluster_.DomainOf(gpu), member});
    }
    std::sort(members_by_domain_.begin(), members_by_domain_.end());
    for (size_t begin = 0; begin < members_by_domain_.size();) {
      size_t end = begin;
      while (end < members_by_domain_.size() &&
             members_by_domain_[end].first == members_by_domain_[begin].first) {
        ++end;
      }
      RouteToDomain(work.piece, holders, members_by_domain_[begin].first, begin, end);
      begin = end;
    }
  }

  void RouteToDomain(int32_t piece, const std::vector<int32_t>& holders, int32_t domain,
                     size_t begin, size_t end) {
    const int64_t bytes = plan_->pieces[piece].bytes;
    // Holders inside the domain serve every member over NVLink (or locally).
    int32_t best_local = -1;
    for (int32_t holder : holders) {
      const int32_t gpu = problem_.SourceGpuOfView(holder);
      if (cluster_.DomainOf(gpu) != domain) continue;
      if (best_local < 0 || loads_.At(gpu, kNvlinkOut) <
                                loads_.At(problem_.SourceGpuOfView(best_local), kNvlinkOut)) {
        best_local = holder;
      }
    }
    if (best_local >= 0) {
      for (size_t i = begin; i < end; ++i) {
        const int32_t member = members_by_domain_[i].second;
        const int32_t member_gpu = problem_.DestinationGpuOfView(member);
        int32_t holder = best_local;
        for (int32_t h : holders) {
          if (problem_.SourceGpuOfView(h) == member_gpu) holder = h;
        }
        Emit(SourceEndpoint(holder), member, piece, bytes, -1);
      }
      return;
    }
    // Otherwise cross the network once: least loaded sender to least loaded receiver.
    int32_t sender = holders[0];
    for (int32_t h : holders) {
      if (loads_.At(problem_.SourceGpuOfView(h), kNicOut) <
          loads_.At(problem_.SourceGpuOfView(sender), kNicOut)) {
        sender = h;
      }
    }
    if (!options_.hierarchical) {
      for (size_t i = begin; i < end; ++i) {
        Emit(SourceEndpoint(sender), members_by_domain_[i].second, piece, bytes, -1);
      }
      return;
    }
    size_t leader_at = begin;
    for (size_t i = begin; i < end; ++i) {
      if (loads_.At(problem_.DestinationGpuOfView(members_by_domain_[i].second), kNicIn) <
          loads_.At(problem_.DestinationGpuOfView(members_by_domain_[leader_at].second),
                    kNicIn)) {
        leader_at = i;
      }
    }
    const int32_t leader = members_by_domain_[leader_at].second;
    const int32_t delivered = Emit(SourceEndpoint(sender), leader, piece, bytes, -1);
    const Endpoint from_leader{EndpointKind::kDestinationView,
                               problem_.destinations->views[leader].rank_index, leader};
    for (size_t i = begin; i < end; ++i) {
      if (i == leader_at) continue;
      Emit(from_leader, members_by_domain_[i].second, piece, bytes, delivered);
    }
  }

  Endpoint SourceEndpoint(int32_t view) const {
    return Endpoint{EndpointKind::kSourceView, problem_.sources->views[view].rank_index, view};
  }

  int32_t GpuOf(const Endpoint& endpoint) const {
    return endpoint.IsSourceSide() ? cluster_.SourceGpu(endpoint.rank_index)
                                   : cluster_.DestinationGpu(endpoint.rank_index);
  }

  int32_t Emit(const Endpoint& src, int32_t member, int32_t piece, int64_t bytes,
               int32_t depends_on) {
    Transfer transfer;
    transfer.src = src;
    transfer.dst = Endpoint{EndpointKind::kDestinationView,
                            problem_.destinations->views[member].rank_index, member};
    transfer.piece = piece;
    transfer.bytes = bytes;
    const int32_t src_gpu = GpuOf(transfer.src), dst_gpu = GpuOf(transfer.dst);
    transfer.route = cluster_.RouteBetween(src_gpu, dst_gpu);
    loads_.Add(transfer.route, src_gpu, dst_gpu, bytes);
    plan_->transfers.push_back(transfer);
    depends_on_.push_back(depends_on);
    return static_cast<int32_t>(plan_->transfers.size()) - 1;
  }

  const PlanningProblem& problem_;
  const PlanOptions& options_;
  Plan* plan_;
  const ClusterMap& cluster_;
  LinkLoads loads_;
  std::vector<WorkItem> work_;
  std::vector<int32_t> depends_on_;
  std::vector<std::pair<int32_t, int32_t>> members_by_domain_;  // (domain, member view)
};

}  // namespace

void PlanReshard(const PlanningProblem& problem, const PlanOptions& options, Plan* plan) {
  plan->strategy = kStrategyReshard;
  ReshardPlanner(problem, options, plan).Run();
}

}  // namespace refit::planner

#include "planner/gather_broadcast.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"

#include "planner/link_loads.h"

namespace refit::planner {
namespace {

class GatherBroadcastPlanner {
 public:
  GatherBroadcastPlanner(const PlanningProblem& problem, Plan* plan)
      : problem_(problem),
        plan_(plan),
        cluster_(*problem.cluster),
        loads_(cluster_.num_gpus()),
        source_ranks_by_domain_(cluster_.num_domains()) {
    for (int32_t r = 0; r < static_cast<int32_t>(problem.sources->ranks.size()); ++r) {
      source_ranks_by_domain_[cluster_.DomainOf(cluster_.SourceGpu(r))].push_back(r);
    }
  }

  void Run() {
    const Layout& dst = *problem_.destinations;
    std::vector<std::vector<int32_t>> views_by_tensor(dst.tensors.size());
    for (int32_t v = 0; v < static_cast<int32_t>(dst.views.size()); ++v) {
      views_by_tensor[dst.views[v].tensor].push_back(v);
    }
    std::vector<std::vector<int32_t>> holder_ranks_by_tensor(dst.tensors.size());
    for (const ViewGroup& group : problem_.source_groups) {
      for (int32_t v : group.views) {
        holder_ranks_by_tensor[group.tensor].push_back(problem_.SourceRankOfView(v));
      }
    }
    for (int32_t t = 0; t < static_cast<int32_t>(dst.tensors.size()); ++t) {
      if (views_by_tensor[t].empty()) continue;
      std::vector<int32_t>& holders = holder_ranks_by_tensor[t];
      std::sort(holders.begin(), holders.end());
      holders.erase(std::unique(holders.begin(), holders.end()), holders.end());
      PlanTensor(t, holders[t % holders.size()], views_by_tensor[t]);
    }
    plan_->num_batches = 2 * next_tensor_slot_;
  }

 private:
  void PlanTensor(int32_t tensor, int32_t root_rank, const std::vector<int32_t>& views) {
    const TensorInfo& info = problem_.destinations->tensors[tensor];
    const int32_t gather_batch = 2 * next_tensor_slot_;
    const int32_t broadcast_batch = gather_batch + 1;
    ++next_tensor_slot_;
    Box full;
    full.offset.assign(info.shape.size(), 0);
    full.extent = info.shape;

    // Gather: part j of the tensor onto the j-th source GPU of the root's domain.
    const int32_t root_domain = cluster_.DomainOf(cluster_.SourceGpu(root_rank));
    std::vector<int32_t> owners = source_ranks_by_domain_[root_domain];
    std::rotate(owners.begin(), std::find(owners.begin(), owners.end(), root_rank), owners.end());
    const std::vector<Box> parts = SplitAlong(full, 0, owners.size());
    std::vector<Endpoint> part_holders;
    std::vector<int32_t> part_pieces;
    for (size_t j = 0; j < parts.size(); ++j) {
      const Endpoint owner{EndpointKind::kSourceScratch, owners[j], tensor};
      Gather(tensor, parts[j], owner, gather_batch);
      part_holders.push_back(owner);
      part_pieces.push_back(AddPiece(tensor, parts[j]));
    }

    // Broadcast: domain by domain, part j to the j-th member, then all-gather in the domain.
    std::map<int32_t, std::vector<int32_t>> ranks_by_domain;
    for (int32_t v : views) {
      const int32_t rank = problem_.DestinationRankOfView(v);
      ranks_by_domain[cluster_.DomainOf(cluster_.DestinationGpu(rank))].push_back(rank);
    }
    std::vector<std::vector<int32_t>> chain;
    for (auto& [domain, ranks] : ranks_by_domain) {
      std::sort(ranks.begin(), ranks.end());
      ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
      chain.push_back(ranks);
    }
    std::rotate(chain.begin(), chain.begin() + tensor % chain.size(), chain.end());
    for (const std::vector<int32_t>& members : chain) {
      for (size_t j = 0; j < parts.size(); ++j) {
        const Endpoint receiver{EndpointKind::kDestinationScratch, members[j % members.size()],
                                tensor};
        Emit(part_holders[j], receiver, part_pieces[j], broadcast_batch);
        part_holders[j] = receiver;
      }
      for (size_t j = 0; j < parts.size(); ++j) {
        for (int32_t member : members) {
          if (member == part_holders[j].rank_index) continue;
          Emit(part_holders[j], Endpoint{EndpointKind::kDestinationScratch, member, tensor},
               part_pieces[j], broadcast_batch);
        }
      }
    }
    // Slice: every destination view copies its box out of its rank's full copy.
    for (int32_t v : views) {
      const ViewInfo& view = problem_.destinations->views[v];
      Emit(Endpoint{EndpointKind::kDestinationScratch, view.rank_index, tensor},
           Endpoint{EndpointKind::kDestinationView, view.rank_index, v}, AddPiece(tensor, view.box),
           broadcast_batch);
    }
  }

  void Gather(int32_t tensor, const Box& part, const Endpoint& owner, int32_t batch) {
    cover_.clear();
    uncovered_.clear();
    CoverBox(problem_, tensor, part, &cover_, &uncovered_);
    const int32_t owner_gpu = cluster_.SourceGpu(owner.rank_index);
    for (const CoverPiece& piece : cover_) {
      // Prefer the owner's own copy, then the same domain, then the least loaded sender.
      int32_t best = -1;
      double best_score = 0;
      for (int32_t h : problem_.source_groups[piece.source_group].views) {
        const int32_t gpu = problem_.SourceGpuOfView(h);
        const v1::Route route = cluster_.RouteBetween(gpu, owner_gpu);
        const double score =
            route * 1e18 +
            (route == v1::ROUTE_NETWORK ? loads_.At(gpu, kNicOut) : loads_.At(gpu, kNvlinkOut));
        if (best < 0 || score < best_score) {
          best = h;
          best_score = score;
        }
      }
      Emit(Endpoint{EndpointKind::kSourceView, problem_.SourceRankOfView(best), best}, owner,
           AddPiece(tensor, piece.box), batch);
    }
  }

  int32_t AddPiece(int32_t tensor, const Box& box) {
    plan_->pieces.push_back(
        Piece{tensor, box, BoxBytes(box, problem_.destinations->tensors[tensor].element_bytes)});
    return static_cast<int32_t>(plan_->pieces.size()) - 1;
  }

  void Emit(const Endpoint& src, const Endpoint& dst, int32_t piece, int32_t batch) {
    Transfer transfer;
    transfer.src = src;
    transfer.dst = dst;
    transfer.piece = piece;
    transfer.batch = batch;
    const int32_t src_gpu = cluster_.EndpointGpu(src), dst_gpu = cluster_.EndpointGpu(dst);
    transfer.route = cluster_.RouteBetween(src_gpu, dst_gpu);
    loads_.Add(transfer.route, src_gpu, dst_gpu, plan_->BytesOf(transfer));
    plan_->transfers.push_back(transfer);
  }

  const PlanningProblem& problem_;
  Plan* plan_;
  const ClusterMap& cluster_;
  LinkLoads loads_;
  std::vector<std::vector<int32_t>> source_ranks_by_domain_;
  int32_t next_tensor_slot_ = 0;
  std::vector<CoverPiece> cover_;
  std::vector<Box> uncovered_;
};

}  // namespace

absl::Status PlanGatherBroadcast(const PlanningProblem& problem, const PlanOptions& options,
                                 Plan* plan) {
  (void)options;
  const int64_t tensors = problem.destinations->tensors.size();
  if (2 * tensors > kMaxBatches) {
    return absl::InvalidArgumentError(absl::StrCat("gather_broadcast needs two batches per tensor: ",
                                                   tensors, " tensors take more than ",
                                                   kMaxBatches));
  }
  plan->strategy = kStrategyGatherBroadcast;
  plan->ordered_batches = true;
  GatherBroadcastPlanner(problem, plan).Run();
  return absl::OkStatus();
}

}  // namespace refit::planner

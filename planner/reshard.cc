#include "planner/reshard.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "planner/batch_builder.h"
#include "planner/batch_order.h"
#include "planner/cost_model.h"
#include "planner/least_loaded_set.h"
#include "planner/link_loads.h"

namespace refit::planner {
namespace {

struct WorkItem {
  int32_t piece = 0;
  int32_t source_group = 0;
  int32_t destination_group = 0;
};

// Where a piece landed first in an NVLink domain, so later boxes can forward from it.
struct Arrival {
  int32_t piece = 0;     // into Plan::pieces
  Endpoint at;           // a destination view, or a relay buffer, holding it
  int32_t gpu = -1;      // at's GPU
  int32_t transfer = 0;  // the transfer that brought it, counted as routed (-1: none)
  int32_t batch = -1;    // that transfer's batch (-1: not batched)
};

// A relay buffer of the plan: its GPU, bytes, and the batches it is filled in and last
// read in (it holds memory from the one to the other).
struct RelayBufferLife {
  int32_t gpu = 0;
  int64_t bytes = 0;
  int32_t filled = 0;
  int32_t last_read = 0;
};

uint64_t RelayBufferKey(const Endpoint& buffer) {
  return (static_cast<uint64_t>(buffer.rank_index) << 32) | static_cast<uint32_t>(buffer.index);
}

// What a run of the planner keeps of the plan it routes (each transfer is batched as it
// is routed, except for kLinkLoads).
enum class RouteOutput {
  kPlan,              // the transfers
  kLinkLoads,         // each link's bytes only
  kBatchedLinkLoads,  // each link's bytes in each batch
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

// The depth of a relay tree over `domains` domains (heap order: position p > 0 receives
// from position (p - 1) / 2).
int32_t RelayTreeDepth(size_t domains) {
  int32_t depth = 0;
  while (domains > 1) {
    domains >>= 1;
    ++depth;
  }
  return depth;
}

// The batch size of a relayed plan. Every level of a relay tree costs a batch before its
// deepest domain starts, and every batch costs its latency: with T the destinations' NIC
// time, L a batch's latency and H the depth of the deepest tree, a batch of
// sqrt(T * L / H) seconds on a NIC balances the two (within the staging budget, at least
// 1 MiB).
int64_t RelayBatchBytes(const PlanningProblem& problem, const PlanOptions& options,
                        const LowerBound& bound) {
  size_t most_domains = 1;
  for (int32_t g = 0; g < static_cast<int32_t>(problem.destination_groups.size()); ++g) {
    most_domains = std::max(most_domains, problem.RunsOf(g).size());
  }
  const Bandwidths& bw = problem.cluster->bandwidths();
  const double hops = std::max(1, RelayTreeDepth(most_domains));
  const double latency = bw.batch_latency_s + 8 * bw.message_latency_s;
  const double batch_seconds = std::sqrt(bound.nic_in_seconds * latency / hops);
  const int64_t bytes = static_cast<int64_t>(batch_seconds * bw.nic_bytes_per_s);
  const int64_t budget = std::max<int64_t>(1, options.staging_budget_bytes);
  return std::clamp<int64_t>(bytes, std::min<int64_t>(int64_t{1} << 20, budget), budget);
}

uint64_t TensorDomainKey(int32_t tensor, int32_t domain) {
  return (static_cast<uint64_t>(tensor) << 32) | static_cast<uint32_t>(domain);
}

// How Route brings a piece to one domain of its relay tree: the arrival in the domain's
// parent (nullptr at the root, or without relays), and the member that receives it over
// the network (-1: the least loaded on NIC-in, chosen on the spot).
struct TreeStep {
  const Arrival* parent = nullptr;
  int32_t leader = -1;
};

// NIC-out bytes so far of a source view's GPU.
struct SourceNicOut {
  const PlanningProblem* problem;
  const LinkLoads* loads;
  int64_t operator()(int32_t view) const {
    return loads->At(problem->SourceGpuOfView(view), kNicOut);
  }
};

// NIC-in bytes so far of a source rank's GPU (a relay buffer host).
struct SourceRankNicIn {
  const ClusterMap* cluster;
  const LinkLoads* loads;
  int64_t operator()(int32_t rank_index) const {
    return loads->At(cluster->SourceGpu(rank_index), kNicIn);
  }
};

class ReshardPlanner {
 public:
  // Only kPlan fills plan->transfers; every output fills plan->pieces.
  ReshardPlanner(const PlanningProblem& problem, const PlanOptions& options,
                 const LowerBound& bound, Plan* plan, RouteOutput output)
      : problem_(problem),
        options_(options),
        plan_(plan),
        output_(output),
        cluster_(*problem.cluster),
        loads_(cluster_.num_gpus()),
        source_pace_bytes_(
            static_cast<int64_t>(bound.nic_in_seconds * cluster_.bandwidths().nic_bytes_per_s)),
        relay_batch_bytes_(RelayBatchBytes(problem, options, bound)),
        senders_(SourceNicOut{&problem, &loads_}) {
    FindRelayHosts();
  }

  // Routes (and but for kLinkLoads batches) every piece. Returns the seconds the busiest
  // link needs for all its bytes.
  double Run() {
    FindSharedDomains();
    MakePieces();
    if (output_ != RouteOutput::kLinkLoads) {
      // Relayed plans run in batches sized to fill the relay trees.
      const int64_t budget = RelaysPossible() ? relay_batch_bytes_ : options_.staging_budget_bytes;
      batches_.emplace(problem_.sources->ranks.size(), problem_.destinations->ranks.size(), budget,
                       cluster_.bandwidths());
    }
    std::vector<int32_t> order(work_.size());
    std::iota(order.begin(), order.end(), 0);
    // Largest pieces first onto the least loaded candidates.
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      return plan_->pieces[work_[a].piece].bytes > plan_->pieces[work_[b].piece].bytes;
    });
    for (int32_t w : order) Route(work_[w]);
    for (uint64_t key : shared_domain_order_) RouteSharedDomain(key >> 32, key & 0xffffffff);
    plan_->stats.relayed_bytes = relayed_bytes_;
    plan_->stats.relay_buffer_bytes = relay_buffer_bytes_;
    plan_->stats.relay_buffer_peak_bytes = RelayBufferPeakBytes();
    const double busiest_link_seconds = loads_.BottleneckSeconds(cluster_.bandwidths());
    if (output_ == RouteOutput::kPlan) {
      plan_->num_batches = transfers_.num_batches();
      transfers_.MoveTo(&plan_->transfers);
    }
    return busiest_link_seconds;
  }

  // Whether some transfer would have gone past kMaxBatches (the plan cannot be used).
  bool overflowed() const { return batches_.has_value() && batches_->overflowed(); }

  // Of a kBatchedLinkLoads run: what pricing the plan gives (cost_model.h) with the fewest
  // messages a batch can have, one per rank of a batch that holds any transfer: at most
  // its price.
  double BatchedFloorSeconds() const {
    const Bandwidths& bw = cluster_.bandwidths();
    double seconds = 0;
    for (size_t b = 0; b < batch_loads_.size(); ++b) {
      seconds +=
          batch_loads_[b].BottleneckSeconds(bw) + BatchLatencySeconds(bw, batch_used_[b] ? 1 : 0);
    }
    return seconds;
  }

 private:
  // Whether a piece may go from one destination domain to another: relays are on and a
  // destination group spans several domains.
  bool RelaysPossible() const {
    if (!options_.relays || !options_.hierarchical) return false;
    for (int32_t g = 0; g < static_cast<int32_t>(problem_.destination_groups.size()); ++g) {
      if (problem_.RunsOf(g).size() > 1) return true;
    }
    return false;
  }

  // Per NVLink domain, the source ranks that may hold relay buffers: one per source GPU
  // that holds no destination rank (a destination GPU's NIC-in carries its own pieces).
  void FindRelayHosts() {
    if (!options_.relay_buffers || !options_.hierarchical) return;
    std::vector<bool> destination_gpu(cluster_.num_gpus(), false);
    for (size_t r = 0; r < problem_.destinations->ranks.size(); ++r) {
      destination_gpu[cluster_.DestinationGpu(r)] = true;
    }
    std::vector<bool> taken(cluster_.num_gpus(), false);
    for (int32_t r = 0; r < static_cast<int32_t>(problem_.sources->ranks.size()); ++r) {
      const int32_t gpu = cluster_.SourceGpu(r);
      if (destination_gpu[gpu] || taken[gpu]) continue;
      taken[gpu] = true;
      const int32_t domain = cluster_.DomainOf(gpu);
      if (relay_hosts_.empty()) {
        relay_hosts_.assign(cluster_.num_domains(),
                            LeastLoadedSet<SourceRankNicIn>(SourceRankNicIn{&cluster_, &loads_}));
      }
      relay_hosts_[domain].Add(r);
    }
  }

  // The source rank of `domain` whose relay buffer should receive a piece instead of
  // destination view `leader`: the relay host that has received the least over its NIC,
  // if that is less than the leader has; else -1.
  int32_t RelayHostFor(int32_t domain, int32_t leader) {
    if (relay_hosts_.empty() || relay_hosts_[domain].empty()) return -1;
    const int32_t host = relay_hosts_[domain].Least();
    const int64_t host_in = loads_.At(cluster_.SourceGpu(host), kNicIn);
    return host_in < loads_.At(problem_.DestinationGpuOfView(leader), kNicIn) ? host : -1;
  }

  // The most bytes of relay buffers that one GPU holds in any batch.
  int64_t RelayBufferPeakBytes() const {
    if (relay_buffers_.empty()) return 0;
    // Per GPU: +bytes in the batch a buffer is filled, -bytes after its last read.
    std::vector<std::pair<int64_t, int64_t>> events;  // (gpu * batches + batch, bytes)
    const int64_t batches = transfers_.num_batches() + 1;
    for (const auto& [key, life] : relay_buffers_) {
      events.push_back({life.gpu * batches + life.filled, life.bytes});
      events.push_back({life.gpu * batches + life.last_read + 1, -life.bytes});
    }
    std::sort(events.begin(), events.end());
    int64_t live = 0, peak = 0;
    for (const auto& [when, bytes] : events) {
      live += bytes;  // a GPU's events net to zero before the next GPU's start
      peak = std::max(peak, live);
    }
    return peak;
  }

  // (tensor, domain) pairs that the fast path cannot plan at the lower bound: the domain
  // holds sources of the tensor, or its destination boxes overlap without being equal.
  // They are planned box by box in RouteSharedDomain instead.
  void FindSharedDomains() {
    const int32_t num_tensors = problem_.destinations->tensors.size();
    tensor_shares_a_domain_.assign(num_tensors, false);
    absl::flat_hash_map<int32_t, std::vector<const Box*>> boxes_by_domain;
    int32_t tensor = -1;
    auto finish_tensor = [&]() {
      for (const auto& [domain, boxes] : boxes_by_domain) {
        bool shared = problem_.SourcesOfTensorIn(tensor, domain);
        for (size_t i = 0; i < boxes.size() && !shared; ++i) {
          for (size_t j = i + 1; j < boxes.size() && !shared; ++j) {
            shared = Overlaps(*boxes[i], *boxes[j]);
          }
        }
        if (shared) {
          shared_domains_.insert(TensorDomainKey(tensor, domain));
          tensor_shares_a_domain_[tensor] = true;
        }
      }
      boxes_by_domain.clear();
    };
    for (int32_t g = 0; g < static_cast<int32_t>(problem_.destination_groups.size()); ++g) {
      const ViewGroup& group = problem_.destination_groups[g];
      if (group.tensor != tensor) {
        if (tensor >= 0) finish_tensor();
        tensor = group.tensor;
      }
      for (const DomainMembers& run : problem_.RunsOf(g)) {
        boxes_by_domain[run.domain].push_back(&group.box);
      }
    }
    if (tensor >= 0) finish_tensor();
    shared_domain_order_.assign(shared_domains_.begin(), shared_domains_.end());
    std::sort(shared_domain_order_.begin(), shared_domain_order_.end());
  }

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
        // Pieces that may be relayed from domain to domain travel in chunks of a quarter
        // relay batch, so that a relay forwards one chunk while the next arrives, and an
        // inner domain of a relay tree forwards its two copies in one batch.
        if (options_.relays && options_.hierarchical && problem_.RunsOf(g).size() > 1) {
          parts = std::max(parts, (bytes * 4 + relay_batch_bytes_ - 1) / relay_batch_bytes_);
        }
        if (parts == 1) {
          work_.push_back(WorkItem{AddPiece(group.tensor, cover.box), cover.source_group, g});
          continue;
        }
        for (const Box& part : SplitAlong(cover.box, SplitDim(cover.box, parts), parts)) {
          work_.push_back(WorkItem{AddPiece(group.tensor, part), cover.source_group, g});
        }
      }
    }
  }

  int32_t AddPiece(int32_t tensor, const Box& box) {
    plan_->pieces.push_back(
        Piece{tensor, box, BoxBytes(box, problem_.destinations->tensors[tensor].element_bytes)});
    return static_cast<int32_t>(plan_->pieces.size()) - 1;
  }

  // Emits the transfers that bring one piece to every member of its destination group.
  // With relays the group's domains form a binary tree (heap order): a domain may get the
  // piece from its parent rather than from a source. Pieces alternate between the tree in
  // domain order and its mirror (a domain inner in one is a leaf in the other), as NCCL's
  // double binary tree, so every domain forwards about what it receives and the deepest
  // domain is log2(domains) hops from the sources, not one hop per domain as in a chain.
  void Route(const WorkItem& work) {
    const std::vector<int32_t>& holders = problem_.source_groups[work.source_group].views;
    const int32_t tensor = problem_.destination_groups[work.destination_group].tensor;
    senders_.Clear();
    for (int32_t h : holders) senders_.Add(h);
    tree_runs_.clear();
    for (const DomainMembers& run : problem_.RunsOf(work.destination_group)) {
      // Pairs outside shared_domains_ hold no source of the tensor: straight to the network.
      if (tensor_shares_a_domain_[tensor] &&
          shared_domains_.contains(TensorDomainKey(tensor, run.domain))) {
        continue;
      }
      tree_runs_.push_back(&run);
    }
    const size_t n = tree_runs_.size();
    // Each domain's receiving member, chosen once: choosing the tree needs them, and no
    // transfer of this piece changes a member's NIC-in before its own domain is served.
    tree_leaders_.assign(n, -1);
    const bool trees = n > 1 && options_.relays;
    if (trees) {
      for (size_t i = 0; i < n; ++i) tree_leaders_[i] = LeastNicIn(*tree_runs_[i]);
    }
    const int mirrored = trees ? ChooseTree(plan_->pieces[work.piece].bytes) : 0;
    tree_arrivals_.resize(n);
    for (size_t position = 0; position < n; ++position) {
      const size_t i = mirrored ? n - 1 - position : position;
      const DomainMembers& run = *tree_runs_[i];
      const Arrival* parent =
          options_.relays && position > 0 ? &tree_arrivals_[(position - 1) / 2] : nullptr;
      const TreeStep step{parent != nullptr && Readable(*parent) ? parent : nullptr,
                          tree_leaders_[i]};
      tree_arrivals_[position] = RouteToDomain(work.piece, holders, run.domain,
                                               problem_.MembersOf(run), /*may_hold=*/false, &step);
    }
  }

  // The member of `run` that has received the least over its NIC so far.
  int32_t LeastNicIn(const DomainMembers& run) const {
    return LeastLoaded(problem_.MembersOf(run), kNicIn,
                       [&](int32_t view) { return problem_.DestinationGpuOfView(view); });
  }

  // Which tree the piece takes (0: domain order, 1: its mirror): the one whose busiest
  // forwarding GPU (each domain's least loaded member on NIC-in receives, and forwards to
  // its children) ends with the fewest bytes on its NIC-out; on a tie the tree that has
  // carried fewer bytes.
  int ChooseTree(int64_t bytes) {
    const size_t n = tree_runs_.size();
    int64_t busiest[2] = {0, 0};
    for (size_t position = 0; 2 * position + 1 < n; ++position) {
      const int64_t children = 2 * position + 2 < n ? 2 : 1;
      for (int mirrored = 0; mirrored < 2; ++mirrored) {
        const int32_t leader = tree_leaders_[mirrored ? n - 1 - position : position];
        busiest[mirrored] =
            std::max(busiest[mirrored],
                     loads_.At(problem_.DestinationGpuOfView(leader), kNicOut) + children * bytes);
      }
    }
    const int chosen = busiest[0] != busiest[1] ? (busiest[1] < busiest[0] ? 1 : 0)
                                                : (tree_bytes_[1] < tree_bytes_[0] ? 1 : 0);
    tree_bytes_[chosen] += bytes;
    return chosen;
  }

  // Holder of `holders` inside `domain` to serve a member over NVLink: the one on the
  // member's own GPU, else the least loaded; -1 when the domain holds none.
  int32_t LocalHolder(const std::vector<int32_t>& holders, int32_t domain, int32_t member) {
    const int32_t member_gpu = problem_.DestinationGpuOfView(member);
    int32_t best = -1;
    for (int32_t h : holders) {
      const int32_t gpu = problem_.SourceGpuOfView(h);
      if (gpu == member_gpu) return h;
      if (cluster_.DomainOf(gpu) != domain) continue;
      if (best < 0 ||
          loads_.At(gpu, kNvlinkOut) < loads_.At(problem_.SourceGpuOfView(best), kNvlinkOut)) {
        best = h;
      }
    }
    return best;
  }

  // Brings `piece` to `members` (all in `domain`; `may_hold` when sources of the piece may
  // sit in it). Returns the arrival through the network (transfer index, leader view), or
  // transfer -1 when the domain held the piece. With a `step` (Route's domains), the
  // sender is chosen from senders_, the step's parent arrival may send it instead of a
  // source, and its leader (when not -1) receives it.
  Arrival RouteToDomain(int32_t piece, const std::vector<int32_t>& holders, int32_t domain,
                        absl::Span<const int32_t> members, bool may_hold,
                        const TreeStep* step = nullptr) {
    const bool fan_out = step != nullptr;
    const Arrival* relay = fan_out ? step->parent : nullptr;
    const int64_t bytes = plan_->pieces[piece].bytes;
    Arrival arrival{piece, Endpoint{}, -1, -1};
    if (may_hold && LocalHolder(holders, domain, members[0]) >= 0) {
      for (int32_t member : members) {
        Emit(SourceEndpoint(LocalHolder(holders, domain, member)), DestinationEndpoint(member),
             piece, nullptr);
      }
      return arrival;
    }
    // Cross the network once: least loaded sender to least loaded receiver.
    const int32_t sender =
        fan_out ? senders_.Least() : LeastLoaded(holders, kNicOut, [&](int32_t view) {
          return problem_.SourceGpuOfView(view);
        });
    if (!options_.hierarchical) {
      for (int32_t member : members) {
        const Arrival sent =
            Emit(SourceEndpoint(sender), DestinationEndpoint(member), piece, nullptr);
        if (arrival.transfer < 0) arrival = sent;
      }
      return arrival;
    }
    if (problem_.any_bucketed_destination) {
      std::vector<int32_t> readable, bucketed;
      for (int32_t member : members) {
        (problem_.DestinationViewReadable(member) ? readable : bucketed).push_back(member);
      }
      if (!bucketed.empty()) {
        return RouteAroundBuckets(piece, holders, domain, readable, bucketed, sender, step);
      }
    }
    const int32_t leader = fan_out && step->leader >= 0
                               ? step->leader
                               : LeastLoaded(members, kNicIn, [&](int32_t view) {
                                   return problem_.DestinationGpuOfView(view);
                                 });
    // Received by the leader, or by a relay buffer on a GPU of the domain that is not a
    // destination, when that GPU's NIC has received less.
    const int32_t host = RelayHostFor(domain, leader);
    const Endpoint receiver =
        host >= 0 ? RelayBufferEndpoint(host, piece) : DestinationEndpoint(leader);
    // A relay while it has room under the pace the destinations' NICs set anyway: the
    // sources then send each piece about once, however many domains need it.
    const int64_t sender_out = loads_.At(problem_.SourceGpuOfView(sender), kNicOut);
    const int64_t relay_out = relay != nullptr ? loads_.At(relay->gpu, kNicOut) : 0;
    if (relay != nullptr && (relay_out + bytes <= source_pace_bytes_ || relay_out < sender_out)) {
      arrival = Emit(relay->at, receiver, piece, relay);
      relayed_bytes_ += bytes;
    } else {
      arrival = Emit(SourceEndpoint(sender), receiver, piece, nullptr);
    }
    if (host < 0) {
      ForwardFrom(arrival, members, piece);
      return arrival;
    }
    relay_buffer_bytes_ += bytes;
    // Domains after this one in the relay tree take the piece from whichever copy here has
    // sent the least over its NIC: the relay buffer, or a member's (a batch later).
    const Arrival copied = ForwardFrom(arrival, members, piece);
    return loads_.At(copied.gpu, kNicOut) < loads_.At(arrival.gpu, kNicOut) ? copied : arrival;
  }

  // Whether later transfers may read where `arrival` landed (not a bucketed view).
  bool Readable(const Arrival& arrival) const {
    return arrival.at.kind != EndpointKind::kDestinationView ||
           problem_.DestinationViewReadable(arrival.at.index);
  }

  // RouteToDomain for a domain with bucketed members, which nothing may forward from:
  // the readable members receive the piece as a domain of their own, and the bucketed
  // ones copy it from where it landed there; with no readable member, each bucketed one
  // receives it over the network (from the step's parent arrival when there is one).
  Arrival RouteAroundBuckets(int32_t piece, const std::vector<int32_t>& holders, int32_t domain,
                             const std::vector<int32_t>& readable,
                             const std::vector<int32_t>& bucketed, int32_t sender,
                             const TreeStep* step) {
    if (!readable.empty()) {
      TreeStep readable_step;
      if (step != nullptr) {
        readable_step.parent = step->parent;
        const bool leader_readable =
            std::find(readable.begin(), readable.end(), step->leader) != readable.end();
        readable_step.leader = leader_readable ? step->leader : -1;
      }
      const Arrival arrival = RouteToDomain(piece, holders, domain, readable, /*may_hold=*/false,
                                            step != nullptr ? &readable_step : nullptr);
      ForwardFrom(arrival, bucketed, piece);
      return arrival;
    }
    const Arrival* relay = step != nullptr ? step->parent : nullptr;
    Arrival first{piece, Endpoint{}, -1, -1};
    for (int32_t member : bucketed) {
      const Arrival sent = relay != nullptr
                               ? Emit(relay->at, DestinationEndpoint(member), piece, relay)
                               : Emit(SourceEndpoint(sender), DestinationEndpoint(member), piece,
                                      nullptr);
      if (first.transfer < 0) first = sent;
    }
    return first;  // not Readable: later domains take the piece from elsewhere
  }

  // The first of `views` whose GPU carries the fewest bytes on `link` so far.
  template <typename GpuOfView>
  int32_t LeastLoaded(absl::Span<const int32_t> views, LinkKind link, GpuOfView gpu_of) const {
    int32_t best = views[0];
    int64_t best_bytes = loads_.At(gpu_of(best), link);
    for (int32_t view : views) {
      const int64_t bytes = loads_.At(gpu_of(view), link);
      if (bytes < best_bytes) {
        best = view;
        best_bytes = bytes;
      }
    }
    return best;
  }

  // Copies `piece` from where it arrived to every member that does not hold it, after it
  // arrived. Returns the copy on the GPU that has sent the least over its NIC (`arrival`
  // when it made none).
  Arrival ForwardFrom(const Arrival& arrival, absl::Span<const int32_t> members, int32_t piece) {
    const bool at_member = arrival.at.kind == EndpointKind::kDestinationView;
    Arrival least = arrival;
    bool copied = false;
    for (int32_t member : members) {
      if (at_member && member == arrival.at.index) continue;
      const Arrival copy = Emit(arrival.at, DestinationEndpoint(member), piece, &arrival);
      if (!Readable(copy)) continue;  // nothing forwards from a bucketed view
      if (!copied || loads_.At(copy.gpu, kNicOut) < loads_.At(least.gpu, kNicOut)) least = copy;
      copied = true;
    }
    return least;
  }

  // Plans one (tensor, domain) pair box by box: regions that already arrived in the domain
  // are forwarded, regions that sources in the domain hold are copied over NVLink, and
  // only the rest crosses the network, once.
  void RouteSharedDomain(int32_t tensor, int32_t domain) {
    std::vector<Arrival> arrived;
    std::vector<int32_t> candidates;
    std::vector<Box> remaining, next;
    const auto first_group =
        std::lower_bound(problem_.destination_groups.begin(), problem_.destination_groups.end(),
                         tensor, [](const ViewGroup& g, int32_t t) { return g.tensor < t; });
    for (auto it = first_group; it != problem_.destination_groups.end() && it->tensor == tensor;
         ++it) {
      const int32_t group = it - problem_.destination_groups.begin();
      absl::Span<const int32_t> members;
      for (const DomainMembers& run : problem_.RunsOf(group)) {
        if (run.domain == domain) members = problem_.MembersOf(run);
      }
      if (members.empty()) continue;
      remaining.assign(1, it->box);
      for (const Arrival& a : arrived) {
        next.clear();
        const Box arrived_box = plan_->pieces[a.piece].box;  // AddPiece may move the pieces
        for (const Box& part : remaining) {
          if (Overlaps(part, arrived_box)) {
            ForwardFrom(a, members, AddPiece(tensor, Intersect(part, arrived_box)));
          }
          Subtract(part, arrived_box, &next);
        }
        remaining.swap(next);
      }
      candidates.clear();
      problem_.index->Query(tensor, it->box, &candidates);
      std::stable_partition(candidates.begin(), candidates.end(), [&](int32_t g) {
        return LocalHolder(problem_.source_groups[g].views, domain, members[0]) >= 0;
      });
      for (int32_t g : candidates) {
        const Box& held = problem_.source_groups[g].box;
        next.clear();
        for (const Box& part : remaining) {
          if (Overlaps(part, held)) {
            const Arrival a = RouteToDomain(AddPiece(tensor, Intersect(part, held)),
                                            problem_.source_groups[g].views, domain, members, true);
            if (a.transfer >= 0 && Readable(a)) arrived.push_back(a);
          }
          Subtract(part, held, &next);
        }
        remaining.swap(next);
      }
    }
  }

  Endpoint SourceEndpoint(int32_t view) const {
    return Endpoint{EndpointKind::kSourceView, problem_.SourceRankOfView(view), view};
  }
  Endpoint DestinationEndpoint(int32_t view) const {
    return Endpoint{EndpointKind::kDestinationView, problem_.DestinationRankOfView(view), view};
  }
  Endpoint RelayBufferEndpoint(int32_t source_rank, int32_t piece) const {
    return Endpoint{EndpointKind::kRelayBuffer, source_rank, piece};
  }

  // Routes `piece` from `src` to `dst` (a destination view or a relay buffer), after the
  // transfer that brought it to `after` (null: none), and returns where it arrived.
  Arrival Emit(const Endpoint& src, const Endpoint& dst, int32_t piece, const Arrival* after) {
    Transfer transfer;
    transfer.src = src;
    transfer.dst = dst;
    transfer.piece = piece;
    const int32_t src_gpu = after != nullptr ? after->gpu : cluster_.EndpointGpu(transfer.src);
    const int32_t dst_gpu = dst.kind == EndpointKind::kDestinationView
                                ? problem_.DestinationGpuOfView(dst.index)
                                : cluster_.EndpointGpu(dst);
    transfer.route = cluster_.RouteBetween(src_gpu, dst_gpu);
    const int64_t bytes = plan_->BytesOf(transfer);
    loads_.Add(transfer.route, src_gpu, dst_gpu, bytes);
    Arrival arrival{piece, dst, dst_gpu, static_cast<int32_t>(emitted_++)};
    if (output_ == RouteOutput::kLinkLoads) return arrival;
    // A forward goes in a later batch than the transfer that brought its bytes.
    arrival.batch = batches_->Place(transfer, bytes, after != nullptr ? after->batch + 1 : 0);
    if (batches_->overflowed()) return arrival;  // refused: nothing more is kept
    if (output_ == RouteOutput::kPlan) {
      TrackRelayBuffer(transfer, arrival.batch, dst_gpu, bytes);
      transfer.batch = arrival.batch;
      transfers_.Add(transfer);
    } else {  // kBatchedLinkLoads
      if (arrival.batch >= static_cast<int32_t>(batch_loads_.size())) {
        batch_loads_.resize(arrival.batch + 1, LinkLoads(cluster_.num_gpus()));
        batch_used_.resize(arrival.batch + 1, false);
      }
      batch_loads_[arrival.batch].Add(transfer.route, src_gpu, dst_gpu, bytes);
      batch_used_[arrival.batch] = true;
    }
    return arrival;
  }

  // Records when a relay buffer is filled (transfer into it) and last read (out of it).
  void TrackRelayBuffer(const Transfer& transfer, int32_t batch, int32_t dst_gpu, int64_t bytes) {
    if (transfer.dst.kind == EndpointKind::kRelayBuffer) {
      relay_buffers_[RelayBufferKey(transfer.dst)] = RelayBufferLife{dst_gpu, bytes, batch, batch};
    } else if (transfer.src.kind == EndpointKind::kRelayBuffer) {
      RelayBufferLife& life = relay_buffers_[RelayBufferKey(transfer.src)];
      life.last_read = std::max(life.last_read, batch);
    }
  }

  const PlanningProblem& problem_;
  const PlanOptions& options_;
  Plan* plan_;
  const RouteOutput output_;
  int64_t emitted_ = 0;                  // transfers routed
  std::optional<BatchBuilder> batches_;  // but for kLinkLoads
  TransfersByBatch transfers_;           // kPlan
  // kBatchedLinkLoads: each batch's link loads, and whether any transfer is in it.
  std::vector<LinkLoads> batch_loads_;
  std::vector<bool> batch_used_;
  const ClusterMap& cluster_;
  LinkLoads loads_;
  // Per NVLink domain, its relay buffer hosts (source ranks) least loaded on NIC-in on top
  // (empty without relay buffers); the plan's relay buffers, by RelayBufferKey.
  std::vector<LeastLoadedSet<SourceRankNicIn>> relay_hosts_;
  absl::flat_hash_map<uint64_t, RelayBufferLife> relay_buffers_;
  int64_t relay_buffer_bytes_ = 0;
  std::vector<WorkItem> work_;
  absl::flat_hash_set<uint64_t> shared_domains_;
  std::vector<bool> tensor_shares_a_domain_;  // per tensor: has a pair in shared_domains_
  std::vector<uint64_t> shared_domain_order_;
  // The domains the piece Route is placing goes to over the network, and where it arrived
  // in each, by position in its relay tree; its receiving member in each; bytes routed by
  // each of the two trees.
  std::vector<const DomainMembers*> tree_runs_;
  std::vector<Arrival> tree_arrivals_;
  std::vector<int32_t> tree_leaders_;  // by index into tree_runs_
  int64_t tree_bytes_[2] = {0, 0};
  // Bytes a GPU's NIC carries in the time the busiest destination domain needs for its
  // NIC-in (the lower bound's term).
  const int64_t source_pace_bytes_;
  const int64_t relay_batch_bytes_;
  int64_t relayed_bytes_ = 0;
  // For the piece Route is placing: its holders, least loaded on top.
  LeastLoadedSet<SourceNicOut> senders_;
};

}  // namespace

absl::Status PlanReshard(const PlanningProblem& problem, const PlanOptions& options,
                         const LowerBound& bound, Plan* plan) {
  plan->strategy = kStrategyReshard;
  ReshardPlanner planner(problem, options, bound, plan, RouteOutput::kPlan);
  planner.Run();
  if (!planner.overflowed()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "the reshard plan needs more than ", kMaxBatches, " batches with a staging budget of ",
      options.staging_budget_bytes, " bytes: raise the staging budget"));
}

double ReshardBusiestLinkSeconds(const PlanningProblem& problem, const PlanOptions& options,
                                 const LowerBound& bound) {
  Plan routed;  // its pieces only
  return ReshardPlanner(problem, options, bound, &routed, RouteOutput::kLinkLoads).Run();
}

double ReshardBatchedFloorSeconds(const PlanningProblem& problem, const PlanOptions& options,
                                  const LowerBound& bound) {
  Plan routed;  // its pieces only
  ReshardPlanner planner(problem, options, bound, &routed, RouteOutput::kBatchedLinkLoads);
  planner.Run();
  return planner.BatchedFloorSeconds();
}

}  // namespace refit::planner

#include "planner/cost_model.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "planner/batch_order.h"
#include "planner/link_loads.h"

namespace refit::planner {

void PricePlan(const PlanningProblem& problem, Plan* plan) {
  SortByBatch(plan);
  const ClusterMap& cluster = *problem.cluster;
  const Bandwidths& bw = cluster.bandwidths();
  const int32_t num_source_ranks = problem.sources->ranks.size();
  auto slot_of = [&](const Endpoint& e) {
    return e.IsSourceSide() ? e.rank_index : num_source_ranks + e.rank_index;
  };
  LinkLoads total(cluster.num_gpus());
  std::vector<int64_t> batch_bytes(cluster.num_gpus() * kNumLinkKinds, 0);
  std::vector<int32_t> touched;
  std::vector<int32_t> peers(num_source_ranks + problem.destinations->ranks.size(), 0);
  std::vector<int32_t> touched_slots;
  // Which (sender, receiver) pairs already exchanged a message in this batch: a stamp
  // matrix when the ranks are few, a hash set otherwise.
  const int64_t num_slots = peers.size();
  const bool use_matrix = num_slots <= 4096;
  std::vector<int32_t> pair_stamp(use_matrix ? num_slots * num_slots : 0, -1);
  absl::flat_hash_set<uint64_t> pairs;
  PlanStats& stats = plan->stats;
  const PlanStats planner_says = stats;  // the planner's figures, not the model's
  stats = PlanStats{};
  stats.relayed_bytes = planner_says.relayed_bytes;
  stats.direct_predicted_seconds = planner_says.direct_predicted_seconds;
  stats.direct_lower_bound_seconds = planner_says.direct_lower_bound_seconds;
  stats.relay_buffer_bytes = planner_says.relay_buffer_bytes;
  stats.relay_buffer_peak_bytes = planner_says.relay_buffer_peak_bytes;
  size_t i = 0;
  for (int32_t b = 0; b < plan->num_batches; ++b) {
    pairs.clear();
    int32_t max_peers = 0;
    for (; i < plan->transfers.size() && plan->transfers[i].batch == b; ++i) {
      const Transfer& t = plan->transfers[i];
      const int64_t bytes = plan->BytesOf(t);
      const int32_t src_gpu = cluster.EndpointGpu(t.src), dst_gpu = cluster.EndpointGpu(t.dst);
      total.Add(t.route, src_gpu, dst_gpu, bytes);
      stats.total_bytes += bytes;
      switch (t.route) {
        case v1::ROUTE_NETWORK:
          stats.network_bytes += bytes;
          break;
        case v1::ROUTE_NVLINK:
          stats.nvlink_bytes += bytes;
          break;
        default:
          stats.local_bytes += bytes;
          break;
      }
      const RouteLinks links = LinksOf(t.route, src_gpu, dst_gpu);
      for (int32_t link : {links.first, links.second}) {
        if (link < 0) continue;
        if (batch_bytes[link] == 0) touched.push_back(link);
        batch_bytes[link] += bytes;
      }
      const int32_t s = slot_of(t.src), d = slot_of(t.dst);
      bool new_pair;
      if (use_matrix) {
        int32_t& stamp = pair_stamp[s * num_slots + d];
        new_pair = stamp != b;
        stamp = b;
      } else {
        new_pair = pairs.insert((static_cast<uint64_t>(s) << 32) | static_cast<uint32_t>(d)).second;
      }
      if (new_pair) {
        for (int32_t slot : {s, d}) {
          if (peers[slot]++ == 0) touched_slots.push_back(slot);
          max_peers = std::max(max_peers, peers[slot]);
        }
      }
    }
    double busiest = 0;
    for (int32_t link : touched) {
      const LinkKind kind = static_cast<LinkKind>(link % kNumLinkKinds);
      busiest = std::max(busiest, batch_bytes[link] / LinkBandwidth(kind, bw));
      batch_bytes[link] = 0;
    }
    touched.clear();
    for (int32_t slot : touched_slots) peers[slot] = 0;
    touched_slots.clear();
    const double latency = BatchLatencySeconds(bw, max_peers);
    stats.predicted_seconds += busiest + latency;
    stats.predicted_latency_seconds += latency;
  }
  stats.max_link_bytes = total.MaxLinkBytes();
  stats.mean_link_bytes = total.MeanBusyLinkBytes();
}

}  // namespace refit::planner

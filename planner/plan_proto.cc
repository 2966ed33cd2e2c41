#include "planner/plan_proto.h"

namespace refit::planner {
namespace {

v1::EndpointKind KindToProto(EndpointKind kind) {
  switch (kind) {
    case EndpointKind::kSourceView:
      return v1::ENDPOINT_SOURCE_VIEW;
    case EndpointKind::kDestinationView:
      return v1::ENDPOINT_DESTINATION_VIEW;
    case EndpointKind::kSourceScratch:
      return v1::ENDPOINT_SOURCE_SCRATCH;
    case EndpointKind::kDestinationScratch:
      return v1::ENDPOINT_DESTINATION_SCRATCH;
    case EndpointKind::kRelayBuffer:
      return v1::ENDPOINT_RELAY_BUFFER;
  }
  return v1::ENDPOINT_UNSPECIFIED;
}

void EndpointToProto(const Endpoint& e, const Plan& plan, const Layout& sources,
                     const Layout& destinations, v1::Endpoint* out) {
  const Layout& side = e.IsSourceSide() ? sources : destinations;
  out->set_kind(KindToProto(e.kind));
  out->set_rank(side.ranks[e.rank_index].rank);
  if (e.kind == EndpointKind::kSourceView || e.kind == EndpointKind::kDestinationView) {
    out->set_view(side.views[e.index].local_index);
  } else if (e.kind == EndpointKind::kRelayBuffer) {
    const Box& box = plan.pieces[e.index].box;
    out->set_relay_buffer(e.index);
    out->mutable_buffer_offset()->Assign(box.offset.begin(), box.offset.end());
    out->mutable_buffer_extent()->Assign(box.extent.begin(), box.extent.end());
  }
}

}  // namespace

v1::Plan PlanToProto(const Plan& plan, const Layout& sources, const Layout& destinations) {
  v1::Plan out;
  out.set_strategy(plan.strategy);
  out.set_digest(plan.digest);
  out.set_ordered_batches(plan.ordered_batches);
  for (int32_t b = 0; b < plan.num_batches; ++b) out.add_batches();
  int64_t sequence = 0;
  for (const Transfer& t : plan.transfers) {
    const Piece& piece = plan.pieces[t.piece];
    v1::Transfer* transfer = out.mutable_batches(t.batch)->add_transfers();
    transfer->set_sequence(sequence++);
    EndpointToProto(t.src, plan, sources, destinations, transfer->mutable_src());
    EndpointToProto(t.dst, plan, sources, destinations, transfer->mutable_dst());
    transfer->set_tensor(destinations.tensors[piece.tensor].name);
    transfer->mutable_offset()->Assign(piece.box.offset.begin(), piece.box.offset.end());
    transfer->mutable_extent()->Assign(piece.box.extent.begin(), piece.box.extent.end());
    transfer->set_bytes(plan.BytesOf(t));
    transfer->set_route(t.route);
  }
  v1::PlanStats* stats = out.mutable_stats();
  stats->set_total_bytes(plan.stats.total_bytes);
  stats->set_network_bytes(plan.stats.network_bytes);
  stats->set_nvlink_bytes(plan.stats.nvlink_bytes);
  stats->set_local_bytes(plan.stats.local_bytes);
  stats->set_lower_bound_network_bytes(plan.stats.lower_bound_network_bytes);
  stats->set_max_link_bytes(plan.stats.max_link_bytes);
  stats->set_mean_link_bytes(plan.stats.mean_link_bytes);
  stats->set_predicted_seconds(plan.stats.predicted_seconds);
  stats->set_lower_bound_seconds(plan.stats.lower_bound_seconds);
  return out;
}

}  // namespace refit::planner

#include "transport/plan_slice.h"

namespace refit::transport {

v1::Plan SlicePlan(const v1::Plan& plan, const RankPlacement& placement, int32_t daemon) {
  auto on = [&](const v1::Endpoint& e) {
    absl::StatusOr<int32_t> where = placement.DaemonOf(EndpointRole(e.kind()), e.rank());
    return where.ok() && *where == daemon;
  };
  v1::Plan slice;
  slice.set_strategy(plan.strategy());
  slice.set_digest(plan.digest());
  slice.set_ordered_batches(plan.ordered_batches());
  for (const v1::Batch& batch : plan.batches()) {
    v1::Batch* out = slice.add_batches();
    for (const v1::Transfer& t : batch.transfers()) {
      if (on(t.src()) || on(t.dst())) *out->add_transfers() = t;
    }
  }
  return slice;
}

}  // namespace refit::transport

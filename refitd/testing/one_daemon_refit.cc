#include "refitd/testing/one_daemon_refit.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "planner/layout.h"
#include "planner/plan_proto.h"
#include "planner/planner.h"
#include "planner/testing/layout_builder.h"
#include "planner/topology.h"
#include "refitd/testing/registration.h"
#include "transport/plan_slice.h"

namespace refit::daemon::testing {

absl::Status OneDaemonRefit::SetUp(RankRegistry* registry, const std::string& node) {
  registry_ = registry;
  const refit::testing::LayoutPair pair = refit::testing::RowsToColumnsPair();
  sources_ = backed_.Back(pair.sources, "source");
  destinations_ = backed_.Back(pair.destinations, "destination");
  for (const auto& [role, spec] :
       {std::pair{v1::ROLE_SOURCE, &sources_}, std::pair{v1::ROLE_DESTINATION, &destinations_}}) {
    for (const v1::RankLayout& rank : spec->ranks()) {
      absl::StatusOr<std::string> session = registry->Register(RegistrationOf(role, rank, *spec));
      if (!session.ok()) {
        return absl::Status(
            session.status().code(),
            absl::StrCat("registering rank ", rank.rank(), ": ", session.status().message()));
      }
    }
  }
  {
    RankRegistry::BufferHold hold = registry->HoldBuffers();
    for (const v1::RankLayout& rank : sources_.ranks()) {
      transport::testing::FillViews(&hold.mutable_buffers(), v1::ROLE_SOURCE, rank);
    }
  }
  absl::StatusOr<planner::Layout> src = planner::CompileLayout(pair.sources, "source");
  if (!src.ok()) return src.status();
  absl::StatusOr<planner::Layout> dst = planner::CompileLayout(pair.destinations, "destination");
  if (!dst.ok()) return dst.status();
  auto plan = planner::BuildPlan(*src, *dst, planner::DgxH100Topology(), planner::PlanOptions());
  if (!plan.ok()) return plan.status();
  plan_ = planner::PlanToProto(**plan, *src, *dst);
  // One daemon (index 0) holds every rank.
  transport::RankPlacement here;
  here.SetDefault(0);
  slice.set_digest(plan_.digest());
  *slice.mutable_plan() = transport::SlicePlan(plan_, here, 0);
  slice.set_daemon_index(0);
  v1::DaemonPeer* self = slice.add_daemons();
  self->set_index(0);
  self->set_node(node);
  for (const auto& [role, spec] :
       {std::pair{v1::ROLE_SOURCE, &sources_}, std::pair{v1::ROLE_DESTINATION, &destinations_}}) {
    for (const v1::RankLayout& rank : spec->ranks()) {
      v1::RankPlacement* p = slice.add_placement();
      p->set_role(role);
      p->set_rank(rank.rank());
      p->set_daemon(0);
    }
  }
  execute.set_epoch_id("test-1");
  execute.set_version(1);
  execute.set_plan_digest(plan_.digest());
  execute.set_deadline_ms(20000);
  execute.set_epoch_number(1);
  execute.set_checksums(true);
  return absl::OkStatus();
}

int64_t OneDaemonRefit::WrongDestinationBytes() const {
  RankRegistry::BufferHold hold = registry_->HoldBuffers();
  int64_t wrong = 0;
  for (const v1::RankLayout& rank : destinations_.ranks()) {
    wrong += transport::testing::WrongBytes(hold.buffers(), v1::ROLE_DESTINATION, rank);
  }
  return wrong;
}

int64_t OneDaemonRefit::DestinationBytes() const {
  int64_t bytes = 0;
  for (const v1::Batch& batch : plan_.batches()) {
    for (const v1::Transfer& t : batch.transfers()) {
      if (t.dst().kind() == v1::ENDPOINT_DESTINATION_VIEW) bytes += t.bytes();
    }
  }
  return bytes;
}

}  // namespace refit::daemon::testing

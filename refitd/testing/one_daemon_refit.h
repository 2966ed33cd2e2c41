// A refit one daemon runs alone, for tests of refitd's parts without a coordinator: the
// RowsToColumns layouts (planner/testing) backed by real shared memory, every rank
// registered in a registry with the sources filled, the planner's plan sliced for daemon 0
// holding every rank, and the execute command of its first epoch.
#ifndef REFIT_REFITD_TESTING_ONE_DAEMON_REFIT_H_
#define REFIT_REFITD_TESTING_ONE_DAEMON_REFIT_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "proto/refit.pb.h"
#include "refitd/rank_registry.h"
#include "transport/testing/backed_layouts.h"

namespace refit::daemon::testing {

class OneDaemonRefit {
 public:
  // Backs the layouts, registers every rank in `registry` (which must outlive this) and
  // fills the sources; plans and slices. An error names what failed.
  absl::Status SetUp(RankRegistry* registry, const std::string& node);

  // Destination bytes that do not hold their element's value (all before an epoch).
  int64_t WrongDestinationBytes() const;
  // The bytes the plan lands in destination views.
  int64_t DestinationBytes() const;

  const v1::LayoutSpec& sources() const { return sources_; }
  const v1::LayoutSpec& destinations() const { return destinations_; }
  const v1::Plan& plan() const { return plan_; }
  // Daemon 0's slice of the plan; the epoch's command (epoch "test-1", version 1, checksums).
  v1::PlanSlice slice;
  v1::ExecuteEpoch execute;

 private:
  RankRegistry* registry_ = nullptr;
  transport::testing::BackedLayouts backed_;
  v1::LayoutSpec sources_, destinations_;
  v1::Plan plan_;
};

}  // namespace refit::daemon::testing

#endif  // REFIT_REFITD_TESTING_ONE_DAEMON_REFIT_H_

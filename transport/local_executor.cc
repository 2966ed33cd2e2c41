#include "transport/local_executor.h"

#include "transport/plan_executor.h"

namespace refit::transport {

absl::StatusOr<ExecutionStats> ExecuteLocally(const v1::Plan& plan, BufferMap* buffers) {
  RankPlacement everything_here;
  everything_here.SetDefault(0);
  PlanExecutor executor(buffers, everything_here, /*self=*/0, /*worker=*/nullptr, {});
  return executor.Run(plan, /*epoch=*/0, absl::InfiniteFuture());
}

}  // namespace refit::transport

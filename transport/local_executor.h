// The `local` backend: runs a plan whose endpoints all live in one refitd's BufferMap,
// copying straight between the mapped buffers (no staging copy), batch by batch and in
// list order inside a batch. Scratch endpoints (gather_broadcast) get dense full-tensor
// buffers for the length of the run. (PlanExecutor with every rank on one daemon.)
#ifndef REFIT_TRANSPORT_LOCAL_EXECUTOR_H_
#define REFIT_TRANSPORT_LOCAL_EXECUTOR_H_

#include "absl/status/statusor.h"
#include "proto/refit.pb.h"
#include "transport/buffer_map.h"
#include "transport/execution_stats.h"

namespace refit::transport {

// Executes `plan`. Fails, naming the transfer, when an endpoint is not registered here or
// a box leaves its view; transfers before the failing one have run.
absl::StatusOr<ExecutionStats> ExecuteLocally(const v1::Plan& plan, BufferMap* buffers);

}  // namespace refit::transport

#endif  // REFIT_TRANSPORT_LOCAL_EXECUTOR_H_

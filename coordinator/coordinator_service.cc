#include "coordinator/coordinator_service.h"

#include <algorithm>

#include "daemon/control_validation.h"
#include "daemon/request_limits.h"
#include "daemon/status_mapping.h"
#include "security/grpc_security.h"

namespace refit::daemon {

grpc::Status CoordinatorService::Refit(grpc::ServerContext* context,
                                       const v1::RefitRequest* request, v1::RefitReport* response) {
  if (grpc::Status allowed = security::CheckToken(token_, *context); !allowed.ok()) return allowed;
  if (absl::Status version = CheckVersion(request->version(), "Refit: version"); !version.ok()) {
    return ToGrpc(version);
  }
  // The earlier of the request's deadline (or the job's) and the call's own.
  absl::Duration timeout =
      request->deadline_ms() > 0 ? absl::Milliseconds(request->deadline_ms()) : default_deadline_;
  timeout = std::min(timeout, absl::FromChrono(context->deadline()) - absl::Now());
  absl::StatusOr<v1::RefitReport> report =
      runner_->Refit(request->version(), timeout, [context]() { return context->IsCancelled(); });
  if (!report.ok()) return ToGrpc(report.status());
  *response = *report;
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::Status(grpc::ServerContext* context, const v1::StatusRequest*,
                                        v1::StatusResponse* response) {
  if (grpc::Status allowed = security::CheckToken(token_, *context); !allowed.ok()) return allowed;
  *response = runner_->Status();
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::Layouts(grpc::ServerContext* context, const v1::LayoutsRequest*,
                                         v1::LayoutsResponse* response) {
  if (grpc::Status allowed = security::CheckToken(token_, *context); !allowed.ok()) return allowed;
  absl::StatusOr<ClusterSnapshot> snapshot = cluster_->Snapshot();
  if (!snapshot.ok()) return ToGrpc(snapshot.status());
  *response->mutable_sources() = snapshot->sources;
  *response->mutable_destinations() = snapshot->destinations;
  for (const v1::RankPlacement& p : snapshot->placement) *response->add_placement() = p;
  for (const v1::DaemonPeer& d : snapshot->daemons) {
    v1::DaemonPeer* peer = response->add_daemons();
    peer->set_index(d.index());
    peer->set_node(d.node());
  }
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::WatchEpoch(grpc::ServerContext* context,
                                            const v1::WatchEpochRequest* request,
                                            grpc::ServerWriter<v1::EpochProgress>* writer) {
  if (grpc::Status allowed = security::CheckToken(token_, *context); !allowed.ok()) return allowed;
  const absl::Duration timeout =
      request->timeout_ms() > 0 ? absl::Milliseconds(request->timeout_ms()) : default_deadline_;
  const bool found = runner_->Watch(
      request->epoch_id(), absl::Now() + timeout,
      [&](const v1::EpochProgress& progress) {
        return !context->IsCancelled() && writer->Write(progress);
      },
      [&]() { return context->IsCancelled(); }, request->version());
  if (!found) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND, request->epoch_id().empty()
                                                         ? "no epoch started in time"
                                                         : "no such epoch: " + request->epoch_id());
  }
  return grpc::Status::OK;
}

}  // namespace refit::daemon

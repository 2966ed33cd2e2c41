// The coordinator's public gRPC API, for orchestration code and refitctl: Refit, WatchEpoch,
// Status and Layouts. Handlers only translate; EpochRunner and Cluster do the work. The
// daemons' control streams are another service (coordinator/control_service.h) with a token
// of their own.
#ifndef REFIT_COORDINATOR_COORDINATOR_SERVICE_H_
#define REFIT_COORDINATOR_COORDINATOR_SERVICE_H_

#include <string>

#include "absl/time/time.h"
#include "coordinator/cluster.h"
#include "coordinator/epoch_runner.h"
#include "proto/refit.grpc.pb.h"

namespace refit::daemon {

class CoordinatorService final : public v1::Coordinator::Service {
 public:
  // With a `token`, every call must carry it (security::AttachToken).
  CoordinatorService(Cluster* cluster, EpochRunner* runner, absl::Duration default_deadline,
                     std::string token)
      : cluster_(cluster),
        runner_(runner),
        default_deadline_(default_deadline),
        token_(std::move(token)) {}

  grpc::Status Refit(grpc::ServerContext* context, const v1::RefitRequest* request,
                     v1::RefitReport* response) override;
  grpc::Status Status(grpc::ServerContext* context, const v1::StatusRequest* request,
                      v1::StatusResponse* response) override;
  grpc::Status Layouts(grpc::ServerContext* context, const v1::LayoutsRequest* request,
                       v1::LayoutsResponse* response) override;
  grpc::Status WatchEpoch(grpc::ServerContext* context, const v1::WatchEpochRequest* request,
                          grpc::ServerWriter<v1::EpochProgress>* writer) override;

 private:
  Cluster* cluster_;
  EpochRunner* runner_;
  const absl::Duration default_deadline_;
  const std::string token_;
};

}  // namespace refit::daemon

#endif  // REFIT_COORDINATOR_COORDINATOR_SERVICE_H_

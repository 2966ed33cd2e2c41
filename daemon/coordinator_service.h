// The coordinator's gRPC API: the daemons' control streams, Refit and Status for
// orchestration code. Handlers only translate; Cluster and EpochRunner do the work.
#ifndef REFIT_DAEMON_COORDINATOR_SERVICE_H_
#define REFIT_DAEMON_COORDINATOR_SERVICE_H_

#include <map>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/cluster.h"
#include "daemon/epoch_runner.h"
#include "proto/refit.grpc.pb.h"

namespace refit::daemon {

class CoordinatorService final : public v1::Coordinator::Service {
 public:
  // `metrics` may be null.
  // A daemon is told to heartbeat within `lease` (the lease itself is enforced by whoever
  // calls Cluster::CutExpired).
  // With a `token`, every call must carry it (security::AttachToken).
  CoordinatorService(Cluster* cluster, EpochRunner* runner, absl::Duration default_deadline,
                     absl::Duration lease, CoordinatorMetrics* metrics = nullptr,
                     std::string token = "")
      : cluster_(cluster),
        runner_(runner),
        default_deadline_(default_deadline),
        lease_(lease),
        metrics_(metrics),
        token_(std::move(token)) {}

  grpc::Status Control(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::CoordinatorMessage, v1::DaemonMessage>* stream) override;
  grpc::Status Refit(grpc::ServerContext* context, const v1::RefitRequest* request,
                     v1::RefitReport* response) override;
  grpc::Status Status(grpc::ServerContext* context, const v1::StatusRequest* request,
                      v1::StatusResponse* response) override;
  grpc::Status Layouts(grpc::ServerContext* context, const v1::LayoutsRequest* request,
                       v1::LayoutsResponse* response) override;
  grpc::Status WatchEpoch(grpc::ServerContext* context, const v1::WatchEpochRequest* request,
                          grpc::ServerWriter<v1::EpochProgress>* writer) override;

  // Cancels every control stream that has not said hello within a lease of opening, so
  // streams that never speak hold no handler thread; returns how many. Called by whoever
  // enforces the leases.
  // `now`: MonotonicNow().
  int CutStreamsWithoutHello(absl::Duration now) ABSL_LOCKS_EXCLUDED(hello_mu_);

 private:
  void UpdateRankGauges();

  Cluster* cluster_;
  EpochRunner* runner_;
  const absl::Duration default_deadline_;
  const absl::Duration lease_;
  CoordinatorMetrics* metrics_;
  const std::string token_;
  absl::Mutex hello_mu_;
  // Control streams still waiting for their hello, and until when they may.
  std::map<grpc::ServerContext*, absl::Duration> awaiting_hello_ ABSL_GUARDED_BY(hello_mu_);
};

}  // namespace refit::daemon

#endif  // REFIT_DAEMON_COORDINATOR_SERVICE_H_

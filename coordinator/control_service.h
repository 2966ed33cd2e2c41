// The coordinator's internal gRPC service: one control stream per refitd. A stream opens
// with the daemon's hello; then registrations, publishes, progress and epoch reports come
// in, and plan slices, execute, commit and abort go out. Handlers only translate: Cluster
// keeps who is connected, EpochRunner the epochs.
#ifndef REFIT_COORDINATOR_CONTROL_SERVICE_H_
#define REFIT_COORDINATOR_CONTROL_SERVICE_H_

#include <map>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/cluster.h"
#include "coordinator/epoch_runner.h"
#include "daemon/metrics.h"
#include "proto/refit.grpc.pb.h"

namespace refit::daemon {

class ControlService final : public v1::CoordinatorControl::Service {
 public:
  // A daemon is told to heartbeat within `lease` (the lease itself is enforced by whoever
  // calls Cluster::CutExpired). With a `daemon_token`, every stream must carry it
  // (security::AttachToken). `metrics` may be null.
  ControlService(Cluster* cluster, EpochRunner* runner, absl::Duration lease,
                 CoordinatorMetrics* metrics, std::string daemon_token)
      : cluster_(cluster),
        runner_(runner),
        lease_(lease),
        metrics_(metrics),
        token_(std::move(daemon_token)) {}

  grpc::Status Control(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::CoordinatorMessage, v1::DaemonMessage>* stream) override;

  // Cancels every control stream that has not said hello within a lease of opening, so
  // streams that never speak hold no handler thread; returns how many. Called by whoever
  // enforces the leases.
  // `now`: MonotonicNow().
  int CutStreamsWithoutHello(absl::Duration now) ABSL_LOCKS_EXCLUDED(hello_mu_);

 private:
  void UpdateRankGauges();
  // Tells the daemons of daemon `daemon`'s shared-memory domain which of the domain's
  // destination ranks they may write straight into (a rank registered there, or the
  // daemon said hello), so they map them before an epoch needs them.
  void SendPeerDestinations(int32_t daemon);

  Cluster* cluster_;
  EpochRunner* runner_;
  const absl::Duration lease_;
  CoordinatorMetrics* metrics_;
  const std::string token_;
  absl::Mutex hello_mu_;
  // Control streams still waiting for their hello, and until when they may.
  std::map<grpc::ServerContext*, absl::Duration> awaiting_hello_ ABSL_GUARDED_BY(hello_mu_);
};

}  // namespace refit::daemon

#endif  // REFIT_COORDINATOR_CONTROL_SERVICE_H_

// A running coordinator: the registry, the epoch runner and the gRPC service behind one
// listening address (with grpc.health.v1). refit-coordinator, the control-plane benchmark
// and the control-plane tests all start it the same way.
#ifndef REFIT_COORDINATOR_COORDINATOR_SERVER_H_
#define REFIT_COORDINATOR_COORDINATOR_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/cluster.h"
#include "coordinator/control_service.h"
#include "coordinator/coordinator_service.h"
#include "coordinator/epoch_runner.h"
#include "daemon/connection_listener.h"
#include "daemon/metrics.h"
#include "security/grpc_security.h"
#include "transport/interrupt.h"

namespace refit::daemon {

class CoordinatorServer {
 public:
  // Listens on `listen` (HOST:PORT; port 0 picks a free one). `metrics` may be null.
  // `security`: TLS, mutual TLS, the token public calls must carry and the one the
  // daemons' control streams must carry (default: none).
  // `interceptors` see every RPC of the server (fault-injection tests use them).
  using Interceptors =
      std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>;
  static absl::StatusOr<std::unique_ptr<CoordinatorServer>> Start(
      const std::string& listen, v1::JobSpec job, absl::Duration default_deadline,
      CoordinatorMetrics* metrics = nullptr, const security::ServerSecurity& security = {},
      Interceptors interceptors = {});
  ~CoordinatorServer();

  // HOST:PORT with the port actually bound.
  const std::string& address() const { return address_; }
  Cluster& cluster() { return cluster_; }

 private:
  CoordinatorServer(v1::JobSpec job, absl::Duration default_deadline, CoordinatorMetrics* metrics,
                    std::string token, std::string daemon_token)
      : lease_(absl::Milliseconds(job.lease_ms() > 0 ? job.lease_ms() : 5000)),
        forget_after_(absl::Milliseconds(
            job.forget_daemons_after_ms() > 0 ? job.forget_daemons_after_ms() : 300000)),
        runner_(&cluster_, std::move(job), metrics),
        control_service_(&cluster_, &runner_, lease_, metrics, std::move(daemon_token)),
        service_(&cluster_, &runner_, default_deadline, std::move(token)) {}
  // Cuts off daemons whose lease expired, every quarter lease, until the server stops, and
  // forgets those gone for longer than forget_after_.
  void EnforceLeases();

  const absl::Duration lease_;
  const absl::Duration forget_after_;
  Cluster cluster_;
  EpochRunner runner_;
  ControlService control_service_;
  CoordinatorService service_;
  std::unique_ptr<ConnectionListener> listener_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  // Raised by the destructor: ends the lease thread's sleep at once.
  transport::Interrupt stopping_;
  std::thread lease_thread_;
};

}  // namespace refit::daemon

#endif  // REFIT_COORDINATOR_COORDINATOR_SERVER_H_

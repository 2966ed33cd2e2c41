// refitd's side of the control plane: one control stream to the coordinator, reconnected
// after failures. It introduces the daemon (node, UCX worker address), forwards rank
// registrations, and on the coordinator's word runs epochs on the data plane (its own
// thread owns the UCX worker) and commits versions into the registry.
#ifndef REFIT_DAEMON_COORDINATOR_LINK_H_
#define REFIT_DAEMON_COORDINATOR_LINK_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "daemon/metrics.h"
#include "daemon/rank_registry.h"
#include "proto/refit.grpc.pb.h"
#include "transport/ucx_worker.h"

namespace refit::daemon {

class CoordinatorLink {
 public:
  // `metrics` may be null.
  CoordinatorLink(std::string coordinator, std::string node, RankRegistry* registry,
                  DaemonMetrics* metrics = nullptr)
      : coordinator_(std::move(coordinator)),
        node_(std::move(node)),
        registry_(registry),
        metrics_(metrics) {}
  ~CoordinatorLink() { Stop(); }

  void Start();
  void Stop();
  bool connected() const { return connected_; }

 private:
  using Stream = grpc::ClientReaderWriter<v1::DaemonMessage, v1::CoordinatorMessage>;

  void Run();
  // One control-stream session; returns when the stream ends.
  void Session(transport::UcxWorker* worker);
  bool Write(const v1::DaemonMessage& message);
  v1::EpochDone Execute(const v1::ExecuteEpoch& execute, transport::UcxWorker* worker);

  const std::string coordinator_;
  const std::string node_;
  RankRegistry* registry_;
  DaemonMetrics* metrics_;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> connected_{false};

  absl::Mutex mu_;
  grpc::ClientContext* context_ ABSL_GUARDED_BY(mu_) = nullptr;
  Stream* stream_ ABSL_GUARDED_BY(mu_) = nullptr;

  // Owned by the link's thread.
  v1::PlanSlice slice_;
  int64_t last_bytes_by_route_[v1::Route_ARRAYSIZE] = {};
  std::map<int32_t, std::pair<std::string, std::unique_ptr<transport::UcxEndpoint>>> peers_;
};

}  // namespace refit::daemon

#endif  // REFIT_DAEMON_COORDINATOR_LINK_H_

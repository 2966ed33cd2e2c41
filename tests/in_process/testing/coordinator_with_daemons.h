// A coordinator serving gRPC on loopback and the refitd halves that stand for the daemons of
// nodes (a registry the test owns and a coordinator link over it), in one process: the set-up
// the in-process tests share. A daemon leaves (Unlink: its control stream ends, as when
// refitd dies) and comes back (Link again: a new incarnation) by its node's name.
//
// Threading: driven by the test's thread; the coordinator and the links run their own.
#ifndef REFIT_TESTS_IN_PROCESS_TESTING_COORDINATOR_WITH_DAEMONS_H_
#define REFIT_TESTS_IN_PROCESS_TESTING_COORDINATOR_WITH_DAEMONS_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "coordinator/cluster.h"
#include "coordinator/coordinator_server.h"
#include "daemon/metrics.h"
#include "proto/refit.grpc.pb.h"
#include "refitd/coordinator_link.h"
#include "refitd/rank_registry.h"

namespace refit::daemon::testing {

class CoordinatorWithDaemons {
 public:
  ~CoordinatorWithDaemons() { Stop(); }

  // Starts the coordinator of `job` (`metrics` may be null) and a client of its public API.
  absl::Status Start(const v1::JobSpec& job, CoordinatorMetrics* metrics = nullptr);
  // Links `registry` (which must outlive the link) as the daemon of node `node` and starts
  // the link; a node linked already is replaced (its old link stopped first).
  CoordinatorLink* Link(RankRegistry* registry, const std::string& node,
                        DaemonMetrics* metrics = nullptr);
  // Stops the link of `node`: its control stream ends.
  void Unlink(const std::string& node);
  // Every link, then the coordinator.
  void Stop();
  // The coordinator goes away and comes back on its address with nothing but `job` (the
  // links reconnect by themselves).
  absl::Status RestartCoordinator(const v1::JobSpec& job);

  CoordinatorServer& server() { return *server_; }
  const std::string& address() const { return address_; }
  v1::Coordinator::Stub& stub() { return *stub_; }

  // Refit over the public API (an RPC deadline of 30 s, the epoch's `deadline_ms`).
  grpc::Status Refit(int64_t version, v1::RefitReport* report, int64_t deadline_ms = 10000);
  // The coordinator's Status (a test failure when the call fails).
  v1::StatusResponse Status();
  // Waits (5 s at most) until the coordinator knows `sources` source and `destinations`
  // destination ranks; whether it did.
  bool GroupSeen(int64_t sources, int64_t destinations);
  // Waits (5 s at most) until the coordinator's view of the group satisfies `seen`.
  bool Sees(const std::function<bool(const ClusterSnapshot&)>& seen);
  // Whether `done()` turns true within 5 s (asked every 20 ms: for what offers no
  // notification, such as the coordinator's view or a metric).
  static bool Eventually(const std::function<bool()>& done);

 private:
  std::unique_ptr<CoordinatorServer> server_;
  std::string address_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
  std::map<std::string, std::unique_ptr<CoordinatorLink>> links_;  // by node
};

}  // namespace refit::daemon::testing

#endif  // REFIT_TESTS_IN_PROCESS_TESTING_COORDINATOR_WITH_DAEMONS_H_

// The Prometheus metrics refit exports. The coordinator counts epochs by result, epoch
// durations, bytes by route, registered ranks, the current version and plan build time;
// refitd counts its epochs and the bytes its data plane moved by route.
#ifndef REFIT_DAEMON_METRICS_H_
#define REFIT_DAEMON_METRICS_H_

#include <memory>
#include <string>

#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "proto/refit.pb.h"

namespace refit::daemon {

struct CoordinatorMetrics {
  explicit CoordinatorMetrics(std::shared_ptr<prometheus::Registry> registry);

  void EpochCommitted(double seconds, int64_t network_bytes, int64_t nvlink_bytes,
                      int64_t local_bytes, int64_t version);
  void EpochAborted(double seconds);

  std::shared_ptr<prometheus::Registry> registry;
  prometheus::Family<prometheus::Counter>& epochs;
  prometheus::Counter& committed;
  prometheus::Counter& aborted;
  prometheus::Histogram& epoch_seconds;
  prometheus::Family<prometheus::Counter>& bytes;
  prometheus::Family<prometheus::Gauge>& ranks;
  prometheus::Gauge& current_version;
  prometheus::Gauge& plan_build_seconds;
};

struct DaemonMetrics {
  explicit DaemonMetrics(std::shared_ptr<prometheus::Registry> registry);

  void EpochDone(bool ok);
  void AddBytes(const int64_t (&bytes_by_route)[v1::Route_ARRAYSIZE]);
  // Bytes one epoch exchanged with the daemon of node `peer`.
  void PeerBytes(const std::string& peer, int64_t sent, int64_t received);

  std::shared_ptr<prometheus::Registry> registry;
  prometheus::Family<prometheus::Counter>& epochs;
  prometheus::Family<prometheus::Counter>& bytes;
  prometheus::Family<prometheus::Counter>& peer_bytes;
  prometheus::Family<prometheus::Gauge>& ranks;
};

}  // namespace refit::daemon

#endif  // REFIT_DAEMON_METRICS_H_

// The Prometheus metrics refit exports, every labelled series that can be known ahead
// exported from start at zero (alert queries find them before the first event). The
// coordinator counts epochs by result, refits refused before an epoch by reason, epoch
// durations, bytes by route, registered ranks, the current version, when it was committed
// and plan build time; refitd counts its epochs and the bytes its data plane moved by route
// and by peer, and the version each of its destination ranks holds and since when.
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

// Why a refit ended before any epoch started (refit_refits_refused_total's reason label):
// exported from start, each at zero.
inline constexpr const char* kRefusalReasons[] = {
    "waited_for_another",  // another refit held the group until this one's deadline
    "cancelled",           // the caller went away while it waited
    "stale_version",       // older than the committed version
    "group_disagrees",     // ranks of a side declared a tensor differently
    "incomplete_group",    // ranks missing, or the present ones do not hold everything
    "invalid_layout",      // the layouts cannot be planned (a named tensor, rank and box)
    "not_published",       // the source ranks did not publish the version in time
    "engines_not_paused",  // engines that pause for writes did not, in time, for enough replicas
    "other",
};

// The states of a destination replica (v1::ReplicaStatus, refit_destination_replicas).
inline constexpr const char* kReplicaStates[] = {"current", "behind",     "catching_up",
                                                 "held",    "incomplete", "absent"};

struct CoordinatorMetrics {
  explicit CoordinatorMetrics(std::shared_ptr<prometheus::Registry> registry);

  void EpochCommitted(double seconds, int64_t network_bytes, int64_t nvlink_bytes,
                      int64_t local_bytes, int64_t version);
  void EpochAborted(double seconds);
  // A refit that ended before any epoch started, by reason (kRefusalReasons).
  void RefitRefused(const std::string& reason);

  std::shared_ptr<prometheus::Registry> registry;
  prometheus::Family<prometheus::Counter>& epochs;
  prometheus::Counter& committed;
  prometheus::Counter& aborted;
  prometheus::Histogram& epoch_seconds;
  prometheus::Family<prometheus::Counter>& bytes;
  prometheus::Family<prometheus::Gauge>& ranks;
  prometheus::Gauge& current_version;
  prometheus::Gauge& plan_build_seconds;
  prometheus::Gauge& last_commit_time;
  prometheus::Family<prometheus::Counter>& refused;
  // With destination replicas: how many are in each state (kReplicaStates), per replica
  // whether it holds the committed version (1) or not (0), replicas dropped from an epoch
  // when lost during it, and catch-up epochs by result.
  prometheus::Family<prometheus::Gauge>& replicas;
  prometheus::Family<prometheus::Gauge>& replica_current;
  prometheus::Counter& replicas_dropped;
  prometheus::Family<prometheus::Counter>& catch_ups;
};

// Every series carries the daemon's node as the label `node`.
struct DaemonMetrics {
  DaemonMetrics(std::shared_ptr<prometheus::Registry> registry, const std::string& node = "");

  void EpochDone(bool ok);
  void AddBytes(const int64_t (&bytes_by_route)[v1::Route_ARRAYSIZE]);
  // Bytes one epoch exchanged with the daemon of node `peer`.
  void PeerBytes(const std::string& peer, int64_t sent, int64_t received);
  // The version committed into destination rank `rank`; Forget when the rank leaves.
  void DestinationVersion(int64_t rank, int64_t version);
  void ForgetDestination(int64_t rank);
  // The most relay-buffer bytes this daemon held at once in its last epoch (0: none).
  void RelayBufferPeak(int64_t bytes);
  // The memory of `kind` the data plane keeps across epochs: bytes held now, and how often
  // it was allocated since the daemon started.
  void KeptMemory(const std::string& kind, int64_t bytes, int64_t allocations);
  // One epoch's quantization of source views the destinations hold in FP8: the bytes of
  // the ranks' memory read and the time it took.
  void Quantized(int64_t source_bytes, double seconds);

  std::shared_ptr<prometheus::Registry> registry;
  prometheus::Family<prometheus::Counter>& epochs;
  prometheus::Family<prometheus::Counter>& bytes;
  prometheus::Family<prometheus::Counter>& peer_bytes;
  prometheus::Family<prometheus::Gauge>& ranks;
  prometheus::Family<prometheus::Gauge>& destination_version;
  prometheus::Family<prometheus::Gauge>& destination_commit_time;
  prometheus::Gauge& relay_buffer_peak_bytes;
  prometheus::Family<prometheus::Gauge>& kept_memory_bytes;
  prometheus::Family<prometheus::Counter>& kept_memory_allocations;
  prometheus::Counter& quantized_bytes;
  prometheus::Counter& quantize_seconds;
};

}  // namespace refit::daemon

#endif  // REFIT_DAEMON_METRICS_H_

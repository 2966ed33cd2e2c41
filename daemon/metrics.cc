#include "daemon/metrics.h"

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace refit::daemon {
namespace {

const char* RouteLabel(int route) {
  switch (route) {
    case v1::ROUTE_LOCAL:
      return "local";
    case v1::ROUTE_NVLINK:
      return "nvlink";
    case v1::ROUTE_NETWORK:
      return "network";
    default:
      return "unspecified";
  }
}

prometheus::Histogram::BucketBoundaries EpochBuckets() {
  return {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 60};
}

prometheus::Labels NodeLabel(const std::string& node) {
  if (node.empty()) return {};
  return {{"node", node}};
}

}  // namespace

CoordinatorMetrics::CoordinatorMetrics(std::shared_ptr<prometheus::Registry> r)
    : registry(r),
      epochs(prometheus::BuildCounter()
                 .Name("refit_epochs_total")
                 .Help("Refit epochs by result")
                 .Register(*r)),
      committed(epochs.Add({{"result", "committed"}})),
      aborted(epochs.Add({{"result", "aborted"}})),
      epoch_seconds(prometheus::BuildHistogram()
                        .Name("refit_epoch_duration_seconds")
                        .Help("Wall time of refit epochs, from Refit to commit or abort")
                        .Register(*r)
                        .Add({}, EpochBuckets())),
      bytes(prometheus::BuildCounter()
                .Name("refit_bytes_total")
                .Help("Bytes moved by committed epochs, by route")
                .Register(*r)),
      ranks(prometheus::BuildGauge()
                .Name("refit_registered_ranks")
                .Help("Ranks registered with the coordinator, by role")
                .Register(*r)),
      current_version(prometheus::BuildGauge()
                          .Name("refit_current_version")
                          .Help("The last committed version")
                          .Register(*r)
                          .Add({})),
      plan_build_seconds(prometheus::BuildGauge()
                             .Name("refit_plan_build_seconds")
                             .Help("Time the current plan took to build")
                             .Register(*r)
                             .Add({})),
      last_commit_time(prometheus::BuildGauge()
                           .Name("refit_last_commit_timestamp_seconds")
                           .Help("When the last version was committed (Unix seconds; 0: never "
                                 "since this coordinator started)")
                           .Register(*r)
                           .Add({})),
      refused(prometheus::BuildCounter()
                  .Name("refit_refits_refused_total")
                  .Help("Refits that ended before any epoch started, by reason")
                  .Register(*r)),
      replicas(prometheus::BuildGauge()
                   .Name("refit_destination_replicas")
                   .Help("Destination replicas by state (current, behind, catching_up, held, "
                         "incomplete, absent)")
                   .Register(*r)),
      replica_current(prometheus::BuildGauge()
                          .Name("refit_replica_current")
                          .Help("Whether the destination replica holds the committed version")
                          .Register(*r)),
      replicas_dropped(prometheus::BuildCounter()
                           .Name("refit_replicas_dropped_total")
                           .Help("Destination replicas lost during an epoch, which then ran "
                                 "again for the others")
                           .Register(*r)
                           .Add({})),
      catch_ups(prometheus::BuildCounter()
                    .Name("refit_catch_ups_total")
                    .Help("Epochs that brought replicas lacking the committed version up to it, "
                          "by result")
                    .Register(*r)) {
  // Every series from start, at zero: alert queries find them before the first event.
  for (const char* route : {"local", "nvlink", "network"}) bytes.Add({{"route", route}});
  for (const char* role : {"source", "destination"}) ranks.Add({{"role", role}});
  for (const char* reason : kRefusalReasons) refused.Add({{"reason", reason}});
  for (const char* state : kReplicaStates) replicas.Add({{"state", state}});
  for (const char* result : {"committed", "aborted"}) catch_ups.Add({{"result", result}});
}

void CoordinatorMetrics::RefitRefused(const std::string& reason) {
  refused.Add({{"reason", reason}}).Increment();
}

void CoordinatorMetrics::EpochCommitted(double seconds, int64_t network_bytes, int64_t nvlink_bytes,
                                        int64_t local_bytes, int64_t version) {
  committed.Increment();
  epoch_seconds.Observe(seconds);
  bytes.Add({{"route", "network"}}).Increment(network_bytes);
  bytes.Add({{"route", "nvlink"}}).Increment(nvlink_bytes);
  bytes.Add({{"route", "local"}}).Increment(local_bytes);
  current_version.Set(version);
  last_commit_time.Set(absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()));
}

void CoordinatorMetrics::EpochAborted(double seconds) {
  aborted.Increment();
  epoch_seconds.Observe(seconds);
}

DaemonMetrics::DaemonMetrics(std::shared_ptr<prometheus::Registry> r, const std::string& node)
    : registry(r),
      epochs(prometheus::BuildCounter()
                 .Name("refitd_epochs_total")
                 .Help("Epochs this daemon ran, by result")
                 .Labels(NodeLabel(node))
                 .Register(*r)),
      bytes(prometheus::BuildCounter()
                .Name("refitd_bytes_total")
                .Help("Bytes this daemon's data plane moved, by route")
                .Labels(NodeLabel(node))
                .Register(*r)),
      peer_bytes(prometheus::BuildCounter()
                     .Name("refitd_peer_bytes_total")
                     .Help("Bytes exchanged with other daemons, by peer node and direction")
                     .Labels(NodeLabel(node))
                     .Register(*r)),
      ranks(prometheus::BuildGauge()
                .Name("refitd_registered_ranks")
                .Help("Ranks registered with this daemon, by role")
                .Labels(NodeLabel(node))
                .Register(*r)),
      destination_version(prometheus::BuildGauge()
                              .Name("refitd_destination_version")
                              .Help("The version committed into each destination rank here")
                              .Labels(NodeLabel(node))
                              .Register(*r)),
      destination_commit_time(
          prometheus::BuildGauge()
              .Name("refitd_destination_commit_timestamp_seconds")
              .Help("When each destination rank here last took a new version (Unix seconds)")
              .Labels(NodeLabel(node))
              .Register(*r)),
      relay_buffer_peak_bytes(
          prometheus::BuildGauge()
              .Name("refitd_relay_buffer_peak_bytes")
              .Help("The most relay-buffer bytes (pieces received to forward over NVLink) this "
                    "daemon held at once in its last epoch")
              .Labels(NodeLabel(node))
              .Register(*r)
              .Add({})),
      kept_memory_bytes(prometheus::BuildGauge()
                            .Name("refitd_kept_memory_bytes")
                            .Help("Memory the data plane keeps across epochs, by kind "
                                  "(host_staging, shared_memory_outbox, quantized_sources, "
                                  "quantized_on_arrival)")
                            .Labels(NodeLabel(node))
                            .Register(*r)),
      kept_memory_allocations(
          prometheus::BuildCounter()
              .Name("refitd_kept_memory_allocations_total")
              .Help("How often the data plane allocated (grew) the memory it keeps across "
                    "epochs, by kind; a warm epoch allocates none")
              .Labels(NodeLabel(node))
              .Register(*r)),
      quantized_bytes(prometheus::BuildCounter()
                          .Name("refitd_quantized_source_bytes_total")
                          .Help("Bytes of BF16 or F32 weights quantized into FP8 codes and "
                                "block scales: source views before epochs moved them, "
                                "destination views received wide after")
                          .Labels(NodeLabel(node))
                          .Register(*r)
                          .Add({})),
      quantize_seconds(prometheus::BuildCounter()
                           .Name("refitd_quantize_seconds_total")
                           .Help("Time spent quantizing views (sources before epochs moved them, "
                                 "destinations received wide after)")
                           .Labels(NodeLabel(node))
                           .Register(*r)
                           .Add({})) {
  for (const char* result : {"ok", "failed"}) epochs.Add({{"result", result}});
  for (const char* route : {"local", "nvlink", "network"}) bytes.Add({{"route", route}});
  for (const char* role : {"source", "destination"}) ranks.Add({{"role", role}});
  for (const char* kind :
       {"host_staging", "shared_memory_outbox", "quantized_sources", "quantized_on_arrival"}) {
    KeptMemory(kind, 0, 0);
  }
}

void DaemonMetrics::KeptMemory(const std::string& kind, int64_t bytes, int64_t allocations) {
  const prometheus::Labels labels{{"kind", kind}};
  kept_memory_bytes.Add(labels).Set(static_cast<double>(bytes));
  prometheus::Counter& allocated = kept_memory_allocations.Add(labels);
  if (allocations > allocated.Value()) allocated.Increment(allocations - allocated.Value());
}

void DaemonMetrics::Quantized(int64_t source_bytes, double seconds) {
  quantized_bytes.Increment(static_cast<double>(source_bytes));
  quantize_seconds.Increment(seconds);
}

void DaemonMetrics::RelayBufferPeak(int64_t bytes) {
  relay_buffer_peak_bytes.Set(static_cast<double>(bytes));
}

void DaemonMetrics::DestinationVersion(int64_t rank, int64_t version) {
  const prometheus::Labels labels{{"rank", std::to_string(rank)}};
  prometheus::Gauge& held = destination_version.Add(labels);
  if (held.Value() != static_cast<double>(version)) {
    destination_commit_time.Add(labels).Set(absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()));
  }
  held.Set(version);
}

void DaemonMetrics::ForgetDestination(int64_t rank) {
  const prometheus::Labels labels{{"rank", std::to_string(rank)}};
  for (prometheus::Family<prometheus::Gauge>* family :
       {&destination_version, &destination_commit_time}) {
    if (family->Has(labels)) family->Remove(&family->Add(labels));
  }
}

void DaemonMetrics::EpochDone(bool ok) {
  epochs.Add({{"result", ok ? "ok" : "failed"}}).Increment();
}

void DaemonMetrics::AddBytes(const int64_t (&bytes_by_route)[v1::Route_ARRAYSIZE]) {
  for (int route = v1::ROUTE_LOCAL; route <= v1::ROUTE_NETWORK; ++route) {
    bytes.Add({{"route", RouteLabel(route)}}).Increment(bytes_by_route[route]);
  }
}

void DaemonMetrics::PeerBytes(const std::string& peer, int64_t sent, int64_t received) {
  if (sent > 0) peer_bytes.Add({{"peer", peer}, {"direction", "sent"}}).Increment(sent);
  if (received > 0) {
    peer_bytes.Add({{"peer", peer}, {"direction", "received"}}).Increment(received);
  }
}

}  // namespace refit::daemon

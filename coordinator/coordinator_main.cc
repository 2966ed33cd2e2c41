// refit-coordinator: one per refit group. Registry of daemons and ranks, the planner, and
// the epoch state machine behind the Coordinator gRPC API.

#include <algorithm>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "config/json_files.h"
#include "config/model_files.h"
#include "coordinator/coordinator_server.h"
#include "coordinator/destination_replicas.h"
#include "coordinator/job_validation.h"
#include "daemon/http_endpoints.h"
#include "daemon/metrics.h"
#include "daemon/mutex_mode.h"
#include "daemon/open_file_limit.h"
#include "daemon/program_usage.h"
#include "daemon/shutdown_signal.h"
#include "planner/model_spec.h"
#include "planner/reference_refits.h"
#include "security/grpc_security.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:7700", "address to serve on, HOST:PORT (port 0: any)");
ABSL_FLAG(std::string, job, "", "the refit group, a refit.v1.JobSpec JSON file");
ABSL_FLAG(std::string, tls_cert, "", "TLS: this server's certificate (PEM); empty: plaintext");
ABSL_FLAG(std::string, tls_key, "", "TLS: this server's private key (PEM, mode 600)");
ABSL_FLAG(std::string, tls_client_ca, "",
          "mutual TLS: clients must present a certificate this CA (PEM) signed");
ABSL_FLAG(std::string, token_file, "",
          "calls of the public API (Refit, Status, WatchEpoch, Layouts) must carry the token in "
          "this file (mode 600; clients: REFIT_TOKEN_FILE)");
ABSL_FLAG(std::string, daemon_token_file, "",
          "the daemons' control streams must carry the token in this file (mode 600; refitd: "
          "REFIT_DAEMON_TOKEN_FILE); default: --token_file's");
ABSL_FLAG(bool, insecure, false,
          "run without --token_file: any process that reaches the port may join as a daemon "
          "or trigger refits (only on a network where every host is trusted)");
ABSL_FLAG(int, metrics_port, -1,
          "HTTP port for /metrics, /healthz and /readyz (0: any free port; -1: none)");

int main(int argc, char** argv) {
  refit::daemon::SkipMutexDeadlockDetection();
  refit::daemon::SetProgramUsage(
      "refit-coordinator --job=JOB.json [--listen=HOST:PORT] [--metrics_port=PORT] [TLS and "
      "token flags]\n\nThe refit coordinator: registers every rank's layout through the refitd "
      "daemons, plans each refit epoch and runs it (gRPC service refit.v1.Coordinator).",
      "coordinator/coordinator_main.cc");
  absl::ParseCommandLine(argc, argv);
  const sigset_t signals = refit::daemon::BlockShutdownSignals();
  const int64_t open_files = refit::daemon::RaiseOpenFileLimit();
  if (open_files < 4096) {
    spdlog::warn(
        "refit-coordinator: only {} open files allowed (ulimit -n); a large model or many clients "
        "need more (LimitNOFILE in the systemd unit)",
        open_files);
  }
  refit::v1::JobSpec job;
  if (!absl::GetFlag(FLAGS_job).empty()) {
    absl::Status read = refit::config::ReadJsonFile(absl::GetFlag(FLAGS_job), &job);
    if (!read.ok()) {
      spdlog::error("refit-coordinator: {}", std::string(read.message()));
      return 2;
    }
  }
  if (!job.model().empty()) {
    // Rank counts from the model and the parallel settings.
    absl::StatusOr<refit::planner::RefitScenario> scenario = refit::config::LoadModelRefit(
        job.model(), job.source_parallel(), job.destination_parallel());
    if (!scenario.ok()) {
      spdlog::error("refit-coordinator: job: {}", std::string(scenario.status().message()));
      return 2;
    }
    absl::Status counts = refit::daemon::CheckJobRankCounts(job, scenario->sources.ranks_size(),
                                                            scenario->destinations.ranks_size());
    if (!counts.ok()) {
      spdlog::error("refit-coordinator: {}", std::string(counts.message()));
      return 2;
    }
    job.set_source_ranks(scenario->sources.ranks_size());
    job.set_destination_ranks(scenario->destinations.ranks_size());
    if (job.has_destination_replicas() && job.destination_replicas().ranks_per_replica() == 0) {
      // A replica is one data-parallel group of the engine: its tp ranks.
      absl::StatusOr<refit::v1::ParallelConfig> parallel =
          refit::planner::ParseParallel(job.destination_parallel());
      if (parallel.ok()) {
        job.mutable_destination_replicas()->set_ranks_per_replica(
            static_cast<int32_t>(std::max<int64_t>(1, parallel->tp())));
      }
    }
  }
  if (absl::Status valid = refit::daemon::CheckJob(job); !valid.ok()) {
    spdlog::error("refit-coordinator: {}", std::string(valid.message()));
    return 2;
  }
  const absl::Duration deadline =
      absl::Milliseconds(job.epoch_deadline_ms() > 0 ? job.epoch_deadline_ms() : 60000);
  refit::security::ServerSecurity security;
  security.cert_file = absl::GetFlag(FLAGS_tls_cert);
  security.key_file = absl::GetFlag(FLAGS_tls_key);
  security.client_ca_file = absl::GetFlag(FLAGS_tls_client_ca);
  for (const auto& [flag, token] :
       {std::pair{absl::GetFlag(FLAGS_token_file), &security.token},
        std::pair{absl::GetFlag(FLAGS_daemon_token_file), &security.daemon_token}}) {
    if (flag.empty()) continue;
    absl::StatusOr<std::string> read = refit::security::ReadSecretFile(flag);
    if (!read.ok()) {
      spdlog::error("refit-coordinator: {}", std::string(read.status().message()));
      return 2;
    }
    *token = *read;
  }
  if ((!security.token.empty() || !security.daemon_token.empty()) && security.cert_file.empty()) {
    spdlog::warn("refit-coordinator: a token without --tls_cert crosses the network in plaintext");
  }
  if (security.daemon_token.empty() && !security.token.empty()) {
    spdlog::warn(
        "refit-coordinator: no --daemon_token_file: daemons carry the public API's token, so "
        "whoever may trigger refits may also join as a daemon");
    security.daemon_token = security.token;
  }
  if (!security.daemon_token.empty() && security.token.empty() && !absl::GetFlag(FLAGS_insecure)) {
    spdlog::error(
        "refit-coordinator: --daemon_token_file without --token_file leaves the public "
        "API open; pass both");
    return 2;
  }
  if (security.token.empty()) {
    if (!absl::GetFlag(FLAGS_insecure)) {
      spdlog::error(
          "refit-coordinator: no --token_file: any process that reaches the port could say "
          "hello as a daemon, take over a node or trigger refits; pass --token_file (see "
          "deploy/README.md), or --insecure on a network where every host is trusted");
      return 2;
    }
    spdlog::warn(
        "refit-coordinator: --insecure: no token; any process that reaches {} may {}",
        absl::GetFlag(FLAGS_listen),
        security.daemon_token.empty() ? "join as a daemon or trigger refits" : "trigger refits");
  }
  auto registry = std::make_shared<prometheus::Registry>();
  refit::daemon::CoordinatorMetrics metrics(registry);
  const std::string listen = absl::GetFlag(FLAGS_listen);
  absl::StatusOr<std::unique_ptr<refit::daemon::CoordinatorServer>> server =
      refit::daemon::CoordinatorServer::Start(listen, job, deadline, &metrics, security);
  if (!server.ok()) {
    spdlog::error("refit-coordinator: {}", std::string(server.status().message()));
    return 1;
  }
  refit::daemon::Cluster& cluster = (*server)->cluster();
  const std::string host = listen.substr(0, listen.rfind(':'));
  spdlog::info("refit-coordinator job={} ({} source ranks, {} destination ranks) listening on {}",
               job.name(), job.source_ranks(), job.destination_ranks(), (*server)->address());
  std::unique_ptr<refit::daemon::HttpEndpoints> http;
  if (absl::GetFlag(FLAGS_metrics_port) >= 0) {
    // Ready once every rank the job expects is registered.
    auto started = refit::daemon::HttpEndpoints::Start(
        host, absl::GetFlag(FLAGS_metrics_port), registry, [&cluster, &job]() {
          return cluster.RankCount(refit::v1::ROLE_SOURCE) >= job.source_ranks() &&
                 (job.has_destination_replicas()
                      ? refit::daemon::EnoughReplicas(job, cluster)
                      : cluster.RankCount(refit::v1::ROLE_DESTINATION) >= job.destination_ranks());
        });
    if (!started.ok()) {
      spdlog::error("refit-coordinator: {}", std::string(started.status().message()));
      return 1;
    }
    http = std::move(*started);
    spdlog::info("refit-coordinator metrics on http://{}:{}/metrics", host, http->port());
  }
  const int signal = refit::daemon::WaitForShutdownSignal(signals);
  spdlog::info("refit-coordinator: signal {}, shutting down", signal);
  http.reset();
  server->reset();
  return 0;
}

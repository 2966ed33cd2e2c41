// refitd: the per-node refit daemon. Serves the local API to the node's ranks on a unix
// socket, keeps a control stream to the coordinator, and runs its part of every epoch.
// TLS and the token of the coordinator's control streams come from REFIT_TLS_CA,
// REFIT_TLS_CERT, REFIT_TLS_KEY and REFIT_DAEMON_TOKEN_FILE, else REFIT_TOKEN_FILE
// (security/grpc_security.h).
#include <algorithm>
#include <cstdio>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "daemon/http_endpoints.h"
#include "daemon/metrics.h"
#include "daemon/mutex_mode.h"
#include "daemon/open_file_limit.h"
#include "daemon/program_usage.h"
#include "daemon/shutdown_signal.h"
#include "refitd/coordinator_link.h"
#include "refitd/local_server.h"
#include "refitd/rank_registry.h"
#include "security/grpc_security.h"
#include "spdlog/spdlog.h"
#include "transport/gpu/gpu_support.h"
#include "transport/shared_memory_handoff.h"

ABSL_FLAG(std::string, coordinator, "127.0.0.1:7700", "coordinator address, HOST:PORT");
ABSL_FLAG(std::string, node, "", "this node's name (defaults to the host name)");
ABSL_FLAG(std::string, socket, "/run/refit/refitd.sock", "unix socket for the local API");
ABSL_FLAG(int, metrics_port, -1,
          "HTTP port for /metrics, /healthz and /readyz (0: any free port; -1: none)");
ABSL_FLAG(std::string, metrics_host, "127.0.0.1", "address the HTTP endpoints listen on");
ABSL_FLAG(bool, shared_memory_between_daemons, true,
          "hand chunks to refitd daemons of this host (same boot, same /dev/shm, same user) "
          "through shared memory instead of UCX messages");

ABSL_FLAG(int, copy_threads, 0,
          "threads that copy between host memory within an epoch's batch (local copies and "
          "pieces written straight into ranks of daemons of this host); 0: one per core, at "
          "most 8");

int main(int argc, char** argv) {
  refit::daemon::SkipMutexDeadlockDetection();
  refit::daemon::SetProgramUsage(
      "refitd --coordinator=HOST:PORT --node=NAME [--socket=PATH] [--metrics_port=PORT] "
      "[flags]\n\nThe per-node refit daemon: ranks of this node register through its socket; "
      "it runs its part of each refit epoch's plan.",
      "refitd/refitd_main.cc");
  absl::ParseCommandLine(argc, argv);
  const sigset_t signals = refit::daemon::BlockShutdownSignals();
  const int64_t open_files = refit::daemon::RaiseOpenFileLimit();
  if (open_files < 4096) {
    spdlog::warn(
        "refitd: only {} open files allowed (ulimit -n); a large model or many clients "
        "need more (LimitNOFILE in the systemd unit)",
        open_files);
  }
  std::string node = absl::GetFlag(FLAGS_node);
  if (node.empty()) {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    node = host;
  }
  // The outboxes of daemons killed on this host would stay in /dev/shm for good.
  for (const std::string& orphan : refit::transport::RemoveOrphanedOutboxes()) {
    spdlog::info("refitd {}: removed the shared-memory outbox {} of a daemon that died", node,
                 orphan);
  }
  refit::daemon::RankRegistry registry(node);
  auto server = refit::daemon::LocalServer::Start(absl::GetFlag(FLAGS_socket), &registry);
  if (!server.ok()) {
    spdlog::error("refitd {}: {}", node, server.status().ToString());
    return 1;
  }
  auto metrics_registry = std::make_shared<prometheus::Registry>();
  refit::daemon::DaemonMetrics metrics(metrics_registry, node);
  refit::daemon::CoordinatorLink link(absl::GetFlag(FLAGS_coordinator), node, &registry, &metrics);
  const refit::transport::gpu::GpuSupport gpu = refit::transport::gpu::DetectGpu();
  absl::StatusOr<refit::security::ClientSecurity> security =
      refit::security::ClientSecurityFromEnvironment(refit::security::TokenFor::kDaemonControl);
  if (!security.ok()) {
    spdlog::error("refitd {}: {}", node, std::string(security.status().message()));
    return 2;
  }
  link.SetSecurity(*security);
  link.SetGpuDescription(gpu.description);
  if (absl::GetFlag(FLAGS_shared_memory_between_daemons)) {
    link.SetSharedMemoryDomain(refit::transport::SharedMemoryDomain());
  }
  int copy_threads = absl::GetFlag(FLAGS_copy_threads);
  if (copy_threads <= 0) {
    copy_threads = static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 8u));
  }
  link.SetCopyThreads(copy_threads);
  link.Start();
  std::unique_ptr<refit::daemon::HttpEndpoints> http;
  if (absl::GetFlag(FLAGS_metrics_port) >= 0) {
    // Ready while connected to the coordinator.
    auto started = refit::daemon::HttpEndpoints::Start(
        absl::GetFlag(FLAGS_metrics_host), absl::GetFlag(FLAGS_metrics_port), metrics_registry,
        [&link]() { return link.connected(); }, "gpu: " + gpu.description);
    if (!started.ok()) {
      spdlog::error("refitd {}: {}", node, std::string(started.status().message()));
      return 1;
    }
    http = std::move(*started);
    spdlog::info("refitd node={} metrics on http://{}:{}/metrics", node,
                 absl::GetFlag(FLAGS_metrics_host), http->port());
  }
  spdlog::info("refitd node={} incarnation={} socket={} coordinator={} gpu: {}", node,
               link.incarnation(), (*server)->socket_path(), absl::GetFlag(FLAGS_coordinator),
               gpu.description);
  std::fflush(stdout);
  const int signal = refit::daemon::WaitForShutdownSignal(signals);
  spdlog::info("refitd node={}: signal {}, shutting down", node, signal);
  http.reset();
  link.Stop();
  server->reset();
  return 0;
}

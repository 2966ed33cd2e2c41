// refitd: the per-node refit daemon. Serves the local API to the node's ranks on a unix
// socket, keeps a control stream to the coordinator, and runs its part of every epoch.
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "daemon/coordinator_link.h"
#include "daemon/local_server.h"
#include "daemon/rank_registry.h"
#include "daemon/shutdown_signal.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, coordinator, "127.0.0.1:7700", "coordinator address, HOST:PORT");
ABSL_FLAG(std::string, node, "", "this node's name (defaults to the host name)");
ABSL_FLAG(std::string, socket, "/run/refit/refitd.sock", "unix socket for the local API");

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const sigset_t signals = refit::daemon::BlockShutdownSignals();
  std::string node = absl::GetFlag(FLAGS_node);
  if (node.empty()) {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    node = host;
  }
  refit::daemon::RankRegistry registry(node);
  auto server = refit::daemon::LocalServer::Start(absl::GetFlag(FLAGS_socket), &registry);
  if (!server.ok()) {
    spdlog::error("refitd {}: {}", node, server.status().ToString());
    return 1;
  }
  refit::daemon::CoordinatorLink link(absl::GetFlag(FLAGS_coordinator), node, &registry);
  link.Start();
  spdlog::info("refitd node={} socket={} coordinator={}", node, (*server)->socket_path(),
               absl::GetFlag(FLAGS_coordinator));
  std::fflush(stdout);
  const int signal = refit::daemon::WaitForShutdownSignal(signals);
  spdlog::info("refitd node={}: signal {}, shutting down", node, signal);
  link.Stop();
  server->reset();
  return 0;
}

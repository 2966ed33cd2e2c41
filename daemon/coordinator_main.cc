// refit-coordinator: one per refit group. Registry of daemons and ranks, the planner, and
// the epoch state machine behind the Coordinator gRPC API.
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "client/json_files.h"
#include "daemon/coordinator_service.h"
#include "daemon/shutdown_signal.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:7700", "address to serve on, HOST:PORT (port 0: any)");
ABSL_FLAG(std::string, job, "", "the refit group, a refit.v1.JobSpec JSON file");

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const sigset_t signals = refit::daemon::BlockShutdownSignals();
  refit::v1::JobSpec job;
  if (!absl::GetFlag(FLAGS_job).empty()) {
    absl::Status read = refit::client::ReadJsonFile(absl::GetFlag(FLAGS_job), &job);
    if (!read.ok()) {
      spdlog::error("refit-coordinator: {}", std::string(read.message()));
      return 2;
    }
  }
  const absl::Duration deadline =
      absl::Milliseconds(job.epoch_deadline_ms() > 0 ? job.epoch_deadline_ms() : 60000);
  refit::daemon::Cluster cluster;
  refit::daemon::EpochRunner runner(&cluster, job);
  refit::daemon::CoordinatorService service(&cluster, &runner, deadline);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int port = 0;
  const std::string listen = absl::GetFlag(FLAGS_listen);
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  builder.SetMaxReceiveMessageSize(256 << 20);
  builder.SetMaxSendMessageSize(256 << 20);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    spdlog::error("refit-coordinator: cannot listen on {}", listen);
    return 1;
  }
  const std::string host = listen.substr(0, listen.rfind(':'));
  spdlog::info("refit-coordinator job={} listening on {}:{}", job.name(), host, port);
  const int signal = refit::daemon::WaitForShutdownSignal(signals);
  spdlog::info("refit-coordinator: signal {}, shutting down", signal);
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  return 0;
}

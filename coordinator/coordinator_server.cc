#include "coordinator/coordinator_server.h"

#include <grpcpp/health_check_service_interface.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "daemon/monotonic_clock.h"
#include "spdlog/spdlog.h"

namespace refit::daemon {

absl::StatusOr<std::unique_ptr<CoordinatorServer>> CoordinatorServer::Start(
    const std::string& listen, v1::JobSpec job, absl::Duration default_deadline,
    CoordinatorMetrics* metrics, const security::ServerSecurity& security,
    Interceptors interceptors) {
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      security::MakeServerCredentials(security);
  if (!credentials.ok()) return credentials.status();
  std::unique_ptr<CoordinatorServer> server(new CoordinatorServer(
      std::move(job), default_deadline, metrics, security.token, security.daemon_token));
  grpc::EnableDefaultHealthCheckService(true);
  absl::StatusOr<std::unique_ptr<ConnectionListener>> listener = ConnectionListener::Bind(listen);
  if (!listener.ok()) return listener.status();
  server->listener_ = std::move(*listener);
  grpc::ServerBuilder builder;
  server->listener_->AttachTo(builder, *credentials);
  builder.RegisterService(&server->control_service_);
  builder.RegisterService(&server->service_);
  builder.SetMaxReceiveMessageSize(256 << 20);
  builder.SetMaxSendMessageSize(256 << 20);
  // The daemons' keepalive pings (every half lease, even between messages) are welcome.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 100);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  if (!interceptors.empty()) builder.experimental().SetInterceptorCreators(std::move(interceptors));
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot serve on ", listen));
  }
  server->listener_->Start();
  server->address_ =
      absl::StrCat(listen.substr(0, listen.rfind(':')), ":", server->listener_->port());
  server->lease_thread_ = std::thread(&CoordinatorServer::EnforceLeases, server.get());
  return server;
}

void CoordinatorServer::EnforceLeases() {
  // Sleeps are on the monotonic clock, not waits until a wall-clock time: a clock stepped
  // back must not stall the lease checks.
  while (!stopping_.SleepFor(lease_ / 4)) {
    for (const std::string& cut : cluster_.CutExpired(MonotonicNow(), lease_)) {
      spdlog::warn("{}", cut);
    }
    for (const std::string& node : cluster_.ForgetGone(MonotonicNow(), forget_after_)) {
      spdlog::info("refitd on {} has been gone for {} ms: forgotten (status no longer lists it)",
                   node, absl::ToInt64Milliseconds(forget_after_));
    }
    if (const int cut = control_service_.CutStreamsWithoutHello(MonotonicNow()); cut > 0) {
      spdlog::warn("cut {} control streams that said no hello within {} ms", cut,
                   absl::ToInt64Milliseconds(lease_));
    }
  }
}

CoordinatorServer::~CoordinatorServer() {
  if (lease_thread_.joinable()) {
    stopping_.Raise("the coordinator is stopping");
    lease_thread_.join();
  }
  listener_.reset();  // no connection is handed to a server shutting down
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  }
}

}  // namespace refit::daemon

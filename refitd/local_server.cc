#include "refitd/local_server.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/health_check_service_interface.h"

namespace refit::daemon {

absl::StatusOr<std::unique_ptr<LocalServer>> LocalServer::Start(const std::string& socket_path,
                                                                RankRegistry* registry) {
  if (socket_path.empty() || socket_path.size() > 100) {
    return absl::InvalidArgumentError(
        absl::StrCat("socket path \"", socket_path, "\" must have 1 to 100 characters"));
  }
  // Before the socket is touched: a live refitd's socket is never taken over.
  absl::StatusOr<std::unique_ptr<PidLock>> lock = PidLock::Acquire(socket_path);
  if (!lock.ok()) return lock.status();
  struct stat info;
  if (lstat(socket_path.c_str(), &info) == 0) {
    if (!S_ISSOCK(info.st_mode)) {
      return absl::FailedPreconditionError(
          absl::StrCat(socket_path, " exists and is not a socket; refusing to replace it"));
    }
    unlink(socket_path.c_str());
  }
  auto server = std::unique_ptr<LocalServer>(new LocalServer(socket_path, registry));
  server->lock_ = std::move(*lock);
  // The socket is created owner-only (no window with wider permissions) and stays so:
  // only the user that runs refitd may register buffers with it.
  const mode_t previous_umask = umask(0077);
  absl::StatusOr<std::unique_ptr<ConnectionListener>> listener =
      ConnectionListener::Bind("unix:" + socket_path);
  umask(previous_umask);
  if (!listener.ok()) return listener.status();
  server->listener_ = std::move(*listener);
  if (chmod(socket_path.c_str(), 0600) != 0) {
    return absl::InternalError(absl::StrCat("chmod ", socket_path, ": ", std::strerror(errno)));
  }
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  server->listener_->AttachTo(builder, grpc::InsecureServerCredentials());
  builder.RegisterService(&server->service_);
  builder.SetMaxReceiveMessageSize(64 << 20);
  builder.SetMaxSendMessageSize(64 << 20);
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot serve on unix socket ", socket_path));
  }
  server->listener_->Start();
  return server;
}

LocalServer::~LocalServer() {
  listener_.reset();  // no connection is handed to a server shutting down
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  }
  unlink(socket_path_.c_str());  // ours: the lock says so; released after this
}

}  // namespace refit::daemon

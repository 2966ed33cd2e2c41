#include "daemon/local_server.h"

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
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + socket_path, grpc::InsecureServerCredentials());
  builder.RegisterService(&server->service_);
  builder.SetMaxReceiveMessageSize(64 << 20);
  builder.SetMaxSendMessageSize(64 << 20);
  // The socket is created owner-only (no window with wider permissions) and stays so:
  // only the user that runs refitd may register buffers with it.
  const mode_t previous_umask = umask(0077);
  server->server_ = builder.BuildAndStart();
  umask(previous_umask);
  if (server->server_ == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot listen on unix socket ", socket_path));
  }
  if (chmod(socket_path.c_str(), 0600) != 0) {
    return absl::InternalError(absl::StrCat("chmod ", socket_path, ": ", std::strerror(errno)));
  }
  return server;
}

LocalServer::~LocalServer() {
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  }
  unlink(socket_path_.c_str());  // ours: the lock says so; released after this
}

}  // namespace refit::daemon

// Serves the LocalDaemon API on a unix socket; stops and removes the socket when destroyed.
#ifndef REFIT_REFITD_LOCAL_SERVER_H_
#define REFIT_REFITD_LOCAL_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "daemon/connection_listener.h"
#include "refitd/local_service.h"
#include "refitd/pid_lock.h"
#include "refitd/rank_registry.h"

namespace refit::daemon {

class LocalServer {
 public:
  // Listens on `socket_path` (a stale socket file there is replaced; one a live refitd
  // serves is not: FAILED_PRECONDITION naming its pid); only the owner may connect.
  static absl::StatusOr<std::unique_ptr<LocalServer>> Start(const std::string& socket_path,
                                                            RankRegistry* registry);
  ~LocalServer();

  const std::string& socket_path() const { return socket_path_; }

 private:
  LocalServer(std::string socket_path, RankRegistry* registry)
      : socket_path_(std::move(socket_path)), service_(registry) {}

  std::string socket_path_;
  std::unique_ptr<PidLock> lock_;  // held while the socket is ours
  LocalService service_;
  std::unique_ptr<ConnectionListener> listener_;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace refit::daemon

#endif  // REFIT_REFITD_LOCAL_SERVER_H_

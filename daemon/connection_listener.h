// The listening sockets of refit's gRPC servers, accepted by refit rather than by gRPC.
//
// gRPC 1.51 (Debian 12) stops accepting on a listening socket for good after one accept4
// fails with "Too many open files": a burst of connections that reached the descriptor
// limit left the coordinator or refitd deaf after the burst was gone. Here a thread accepts,
// hands every connection to the server (gRPC's external connection acceptor). Connections
// never take the last quarter of the descriptor limit: that stays for the daemon's own
// files (a UCX worker that cannot open its sockets aborts the process). When the process
// is that short of descriptors (or the kernel out of memory) it sheds the connection, logs
// that (once a minute at most), waits, tries again, and logs again once it accepts.
#ifndef REFIT_DAEMON_CONNECTION_LISTENER_H_
#define REFIT_DAEMON_CONNECTION_LISTENER_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"

namespace refit::daemon {

class ConnectionListener {
 public:
  // Binds and listens on `address`: "HOST:PORT" (TCP on every address HOST resolves to;
  // port 0 picks a free one; "[::]" is dual-stack) or "unix:PATH" (the caller owns the
  // file's mode and removal). Errors name the address and the reason.
  static absl::StatusOr<std::unique_ptr<ConnectionListener>> Bind(const std::string& address);
  // Stops accepting and closes the listening sockets.
  ~ConnectionListener();
  ConnectionListener(const ConnectionListener&) = delete;
  ConnectionListener& operator=(const ConnectionListener&) = delete;

  // Registers this listener's connections with `builder` as coming from outside, with
  // `credentials`; call once, before the server is built.
  void AttachTo(grpc::ServerBuilder& builder, std::shared_ptr<grpc::ServerCredentials> credentials);
  // Starts accepting; call once the server is started (connections wait in the backlog
  // until then).
  void Start();

  // The TCP port bound (0 for a unix socket).
  int port() const { return port_; }

 private:
  ConnectionListener(std::string address, std::vector<int> sockets, int port, int wake);
  void AcceptUntilStopped();
  // Accepts what is waiting on `socket`; false when accepting must pause (out of
  // descriptors or memory), with `why` set.
  bool AcceptPending(int socket, std::string* why);

  const std::string address_;
  const std::vector<int> sockets_;
  const int port_;
  const int wake_;  // an eventfd: written to stop the thread
  std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> acceptor_;
  std::atomic<bool> stopping_ = false;
  std::thread thread_;
};

}  // namespace refit::daemon

#endif  // REFIT_DAEMON_CONNECTION_LISTENER_H_

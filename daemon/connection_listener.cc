#include "daemon/connection_listener.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "daemon/monotonic_clock.h"
#include "spdlog/spdlog.h"

namespace refit::daemon {
namespace {

// How long accepting pauses when the process is out of descriptors or memory.
constexpr int kPauseMs = 100;
constexpr absl::Duration kPauseLogInterval = absl::Minutes(1);

void CloseAll(const std::vector<int>& sockets) {
  for (int socket : sockets) close(socket);
}

absl::Status Failed(const std::string& address, const std::string& step) {
  return absl::UnavailableError(
      absl::StrCat("cannot listen on ", address, ": ", step, ": ", std::strerror(errno)));
}

absl::StatusOr<int> ListenUnix(const std::string& address, const std::string& path) {
  sockaddr_un name{};
  if (path.empty() || path.size() >= sizeof(name.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("cannot listen on ", address,
                                                   ": the path must have 1 to ",
                                                   sizeof(name.sun_path) - 1, " characters"));
  }
  name.sun_family = AF_UNIX;
  std::memcpy(name.sun_path, path.data(), path.size());
  const int socket = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (socket < 0) return Failed(address, "socket");
  if (bind(socket, reinterpret_cast<sockaddr*>(&name), sizeof(name)) != 0 ||
      listen(socket, SOMAXCONN) != 0) {
    absl::Status failed = Failed(address, "bind");
    close(socket);
    return failed;
  }
  return socket;
}

// Every address HOST resolves to, bound to one port; fails only when none can be.
absl::StatusOr<std::vector<int>> ListenTcp(const std::string& address, int* port) {
  const size_t colon = address.rfind(':');
  int wanted = -1;
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &wanted) ||
      wanted < 0 || wanted > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot listen on ", address, ": expected HOST:PORT with a port of 0 to 65535"));
  }
  absl::string_view host_view = absl::string_view(address).substr(0, colon);
  if (absl::ConsumePrefix(&host_view, "[")) absl::ConsumeSuffix(&host_view, "]");
  const std::string host(host_view);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(wanted);
  if (const int error =
          getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found);
      error != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot listen on ", address, ": ", gai_strerror(error)));
  }
  bool has_v4 = false, has_v6 = false;
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    has_v4 |= a->ai_family == AF_INET;
    has_v6 |= a->ai_family == AF_INET6;
  }
  const bool both_families = has_v4 && has_v6;
  std::vector<int> sockets;
  std::string last_error = "no address";
  *port = wanted;
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    if (a->ai_family != AF_INET && a->ai_family != AF_INET6) continue;
    const int socket = ::socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (socket < 0) {
      last_error = absl::StrCat("socket: ", std::strerror(errno));
      continue;
    }
    const int one = 1;
    setsockopt(socket, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (a->ai_family == AF_INET6) {
      // "[::]" alone takes IPv4 too; beside an IPv4 address of its own it must not.
      const int v6_only = both_families ? 1 : 0;
      setsockopt(socket, IPPROTO_IPV6, IPV6_V6ONLY, &v6_only, sizeof(v6_only));
    }
    sockaddr_storage name{};
    std::memcpy(&name, a->ai_addr, a->ai_addrlen);
    if (a->ai_family == AF_INET) {
      reinterpret_cast<sockaddr_in*>(&name)->sin_port = htons(static_cast<uint16_t>(*port));
    } else {
      reinterpret_cast<sockaddr_in6*>(&name)->sin6_port = htons(static_cast<uint16_t>(*port));
    }
    if (bind(socket, reinterpret_cast<sockaddr*>(&name), a->ai_addrlen) != 0 ||
        listen(socket, SOMAXCONN) != 0) {
      last_error = absl::StrCat("bind: ", std::strerror(errno));
      close(socket);
      continue;
    }
    if (*port == 0) {  // the others take the port the first one was given
      socklen_t length = sizeof(name);
      getsockname(socket, reinterpret_cast<sockaddr*>(&name), &length);
      *port = ntohs(name.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&name)->sin_port
                                              : reinterpret_cast<sockaddr_in6*>(&name)->sin6_port);
    }
    sockets.push_back(socket);
  }
  freeaddrinfo(found);
  if (sockets.empty() && host == "::") {
    // "[::]" on a host without IPv6: every IPv4 address, as gRPC does.
    return ListenTcp(absl::StrCat("0.0.0.0:", wanted), port);
  }
  if (sockets.empty()) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", address, ": ", last_error));
  }
  return sockets;
}

// accept4 errors that belong to the one connection being accepted (accept(2), Linux):
// the next one is taken.
bool ConnectionsOwnError(int error) {
  switch (error) {
    case ECONNABORTED:
    case EPROTO:
    case EPERM:
    case ENETDOWN:
    case ENOPROTOOPT:
    case EHOSTDOWN:
    case ENONET:
    case EHOSTUNREACH:
    case EOPNOTSUPP:
    case ENETUNREACH:
    case ETIMEDOUT:
      return true;
    default:
      return false;
  }
}

// A connection given descriptor `fd` leaves the daemon short of descriptors when fd lies in
// the top quarter of the limit: the kernel hands out the lowest free one, so all below are
// taken. That quarter stays for the daemon's own files (shared-memory segments, UCX
// sockets, whose creation aborts the process when it fails halfway). A number, not a count
// (counting /proc/self/fd per connection costs too much at a million descriptors): holes
// that closed files left below the quarter can each still take one connection.
bool NearlyOutOfDescriptors(int fd, std::string* why) {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return false;
  const int64_t allowed = static_cast<int64_t>(limit.rlim_cur);
  const int64_t reserve = allowed / 4;
  if (fd < allowed - reserve) return false;
  *why = absl::StrCat("descriptor ", fd, " of ", allowed, " allowed: the last ", reserve,
                      " are kept for the daemon's own files");
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ConnectionListener>> ConnectionListener::Bind(
    const std::string& address) {
  std::vector<int> sockets;
  int port = 0;
  if (absl::string_view path = address; absl::ConsumePrefix(&path, "unix:")) {
    absl::StatusOr<int> socket = ListenUnix(address, std::string(path));
    if (!socket.ok()) return socket.status();
    sockets.push_back(*socket);
  } else {
    absl::StatusOr<std::vector<int>> bound = ListenTcp(address, &port);
    if (!bound.ok()) return bound.status();
    sockets = std::move(*bound);
  }
  const int wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake < 0) {
    absl::Status failed = Failed(address, "eventfd");
    CloseAll(sockets);
    return failed;
  }
  return std::unique_ptr<ConnectionListener>(
      new ConnectionListener(address, std::move(sockets), port, wake));
}

ConnectionListener::ConnectionListener(std::string address, std::vector<int> sockets, int port,
                                       int wake)
    : address_(std::move(address)), sockets_(std::move(sockets)), port_(port), wake_(wake) {}

ConnectionListener::~ConnectionListener() {
  stopping_ = true;
  const uint64_t one = 1;
  if (write(wake_, &one, sizeof(one)) < 0) {
    // The counter cannot overflow from one write; the thread also sees stopping_ within a pause.
  }
  if (thread_.joinable()) thread_.join();
  CloseAll(sockets_);
  close(wake_);
}

void ConnectionListener::AttachTo(grpc::ServerBuilder& builder,
                                  std::shared_ptr<grpc::ServerCredentials> credentials) {
  acceptor_ = builder.experimental().AddExternalConnectionAcceptor(
      grpc::ServerBuilder::experimental_type::ExternalConnectionType::FROM_FD,
      std::move(credentials));
}

void ConnectionListener::Start() {
  thread_ = std::thread(&ConnectionListener::AcceptUntilStopped, this);
}

bool ConnectionListener::AcceptPending(int socket, std::string* why) {
  for (;;) {
    const int connection = accept4(socket, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (connection >= 0 && NearlyOutOfDescriptors(connection, why)) {
      close(connection);  // shed: the client may try again
      return false;
    }
    if (connection >= 0) {
      if (port_ != 0) {
        const int one = 1;
        setsockopt(connection, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      }
      grpc::experimental::ExternalConnectionAcceptor::NewConnectionParameters connection_parameters;
      connection_parameters.listener_fd = socket;
      connection_parameters.fd = connection;  // the server owns it from here
      acceptor_->HandleNewConnection(&connection_parameters);
      continue;
    }
    const int error = errno;
    if (error == EAGAIN || error == EWOULDBLOCK) return true;
    if (error == EINTR || ConnectionsOwnError(error)) continue;
    *why = std::strerror(error);
    return false;
  }
}

void ConnectionListener::AcceptUntilStopped() {
  std::vector<pollfd> watched;
  for (int socket : sockets_) watched.push_back({socket, POLLIN, 0});
  watched.push_back({wake_, POLLIN, 0});
  bool paused = false;        // since the backlog was last drained
  bool pause_logged = false;  // that pause was logged (then so is its end)
  absl::Duration last_logged = -absl::InfiniteDuration();
  int64_t unlogged_pauses = 0;
  while (!stopping_) {
    if (poll(watched.data(), watched.size(), -1) < 0 && errno != EINTR) {
      spdlog::error("listener on {}: poll: {}", address_, std::strerror(errno));
      return;
    }
    std::string why;
    bool accepted = true;
    for (size_t i = 0; i + 1 < watched.size() && !stopping_; ++i) {
      if (watched[i].revents == 0) continue;
      accepted = AcceptPending(watched[i].fd, &why) && accepted;
    }
    if (accepted && paused) {
      if (pause_logged) spdlog::info("listener on {}: accepting connections again", address_);
      paused = false;
    }
    if (!accepted) {
      if (!paused) {
        // Logged once a minute at most: a burst that keeps the process at its limit pauses
        // and resumes many times.
        paused = true;
        pause_logged = MonotonicNow() - last_logged >= kPauseLogInterval;
        if (pause_logged) {
          spdlog::error(
              "listener on {}: cannot accept a connection ({}); it waits and is tried "
              "again every {} ms{}",
              address_, why, kPauseMs,
              unlogged_pauses > 0
                  ? absl::StrCat(" (", unlogged_pauses, " more pauses since the last one logged)")
                  : "");
          last_logged = MonotonicNow();
          unlogged_pauses = 0;
        } else {
          ++unlogged_pauses;
        }
      }
      // The socket stays readable: wait (or stop) instead of spinning on it.
      pollfd wake = {wake_, POLLIN, 0};
      poll(&wake, 1, kPauseMs);
    }
  }
}

}  // namespace refit::daemon

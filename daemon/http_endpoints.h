// The daemons' HTTP side: /metrics (Prometheus text format, from a prometheus-cpp
// registry), /healthz (the process answers) and /readyz (200 only while `ready` says so,
// for load balancers and Kubernetes probes). Served on its own thread.
#ifndef REFIT_DAEMON_HTTP_ENDPOINTS_H_
#define REFIT_DAEMON_HTTP_ENDPOINTS_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "prometheus/registry.h"

namespace httplib {
class Server;
}

namespace refit::daemon {

class HttpEndpoints {
 public:
  // Listens on host:port (port 0: any free port).
  // `details` (one line, may be empty) follows the verdict in /readyz's body.
  static absl::StatusOr<std::unique_ptr<HttpEndpoints>> Start(
      const std::string& host, int port, std::shared_ptr<prometheus::Registry> registry,
      std::function<bool()> ready, std::string details = "");
  ~HttpEndpoints();

  int port() const { return port_; }

 private:
  HttpEndpoints() = default;

  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace refit::daemon

#endif  // REFIT_DAEMON_HTTP_ENDPOINTS_H_

#include "daemon/http_endpoints.h"

#include <httplib.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "prometheus/text_serializer.h"

namespace refit::daemon {
namespace {

constexpr size_t kHttpWorkers = 32;

}  // namespace

absl::StatusOr<std::unique_ptr<HttpEndpoints>> HttpEndpoints::Start(
    const std::string& host, int port, std::shared_ptr<prometheus::Registry> registry,
    std::function<bool()> ready, std::string details) {
  std::unique_ptr<HttpEndpoints> endpoints(new HttpEndpoints());
  endpoints->server_ = std::make_unique<httplib::Server>();
  httplib::Server& server = *endpoints->server_;
  // Probes must be answered whatever slow clients do: a client gets a second per read (a
  // header trickled a byte every few seconds is dropped, not waited for), one request per
  // connection (no idle keep-alive holds a worker), and enough workers that a handful of
  // slow or stuck clients cannot take them all.
  server.set_read_timeout(1, 0);
  server.set_write_timeout(2, 0);
  server.set_keep_alive_max_count(1);
  server.new_task_queue = [] { return new httplib::ThreadPool(kHttpWorkers); };
  server.Get("/metrics", [registry](const httplib::Request&, httplib::Response& response) {
    response.set_content(prometheus::TextSerializer().Serialize(registry->Collect()),
                         "text/plain; version=0.0.4");
  });
  server.Get("/healthz", [](const httplib::Request&, httplib::Response& response) {
    response.set_content("ok\n", "text/plain");
  });
  server.Get("/readyz", [ready, details](const httplib::Request&, httplib::Response& response) {
    const bool is_ready = ready();
    response.status = is_ready ? 200 : 503;
    response.set_content(
        std::string(is_ready ? "ready\n" : "not ready\n") + (details.empty() ? "" : details + "\n"),
        "text/plain");
  });
  if (port == 0) {
    endpoints->port_ = server.bind_to_any_port(host);
  } else {
    endpoints->port_ = server.bind_to_port(host, port) ? port : -1;
  }
  if (endpoints->port_ <= 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen for HTTP on ", host, ":", port));
  }
  endpoints->thread_ = std::thread([&server]() { server.listen_after_bind(); });
  return endpoints;
}

HttpEndpoints::~HttpEndpoints() {
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace refit::daemon

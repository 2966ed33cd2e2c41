// UCX for the host data plane between refitd daemons: one UCP context and worker per
// daemon (single-threaded), endpoints to peers by worker address, and tagged messages
// whose every wait has a deadline. Daemons exchange worker addresses through the
// coordinator; UCX picks shared memory, TCP or RDMA verbs underneath.
#ifndef REFIT_TRANSPORT_UCX_WORKER_H_
#define REFIT_TRANSPORT_UCX_WORKER_H_

#include <ucp/api/ucp.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace refit::transport {

// Turns a UCX status into an absl::Status naming the call.
absl::Status UcxStatus(ucs_status_t status, const char* call);

class UcxEndpoint;

class UcxWorker {
 public:
  // `name` shows up in UCX's own diagnostics.
  static absl::StatusOr<std::unique_ptr<UcxWorker>> Create(const std::string& name);
  ~UcxWorker();
  UcxWorker(const UcxWorker&) = delete;
  UcxWorker& operator=(const UcxWorker&) = delete;

  // This worker's address, for peers to connect to.
  const std::string& address() const { return address_; }

  absl::StatusOr<std::unique_ptr<UcxEndpoint>> Connect(const std::string& peer_address);

  // Receives one message with exactly `tag` into `buffer`; returns its length.
  // DEADLINE_EXCEEDED (request cancelled) when none arrives in time.
  absl::StatusOr<size_t> Receive(uint64_t tag, void* buffer, size_t capacity, absl::Time deadline);

  ucp_worker_h handle() const { return worker_; }

  // Drives a request to completion or the deadline; frees it either way.
  absl::Status Wait(void* request, absl::Time deadline, const char* what);

 private:
  UcxWorker(ucp_context_h context, ucp_worker_h worker, std::string address)
      : context_(context), worker_(worker), address_(std::move(address)) {}

  ucp_context_h context_;
  ucp_worker_h worker_;
  std::string address_;
};

class UcxEndpoint {
 public:
  ~UcxEndpoint();
  UcxEndpoint(const UcxEndpoint&) = delete;
  UcxEndpoint& operator=(const UcxEndpoint&) = delete;

  // Sends `bytes` of `data` with `tag`; returns once the buffer may be reused.
  absl::Status Send(uint64_t tag, const void* data, size_t bytes, absl::Time deadline);

 private:
  friend class UcxWorker;
  UcxEndpoint(UcxWorker* worker, ucp_ep_h endpoint) : worker_(worker), endpoint_(endpoint) {}

  UcxWorker* worker_;
  ucp_ep_h endpoint_;
};

}  // namespace refit::transport

#endif  // REFIT_TRANSPORT_UCX_WORKER_H_

// UCX for the host data plane between refitd daemons: one UCP context per daemon with two
// workers (single-threaded), one that receives and one that sends, endpoints to peers by
// the receiving worker's address, and tagged messages whose every wait has a deadline.
// Daemons exchange addresses through the coordinator; UCX picks shared memory, TCP or
// RDMA verbs underneath.
//
// Why two workers: when two daemons hold endpoints to each other between the same pair of
// workers, UCX 1.13 (Debian 12) runs both over one TCP connection, and a one-sided close
// of one endpoint (refitd replaces its endpoints after a failed epoch) silently drops
// messages coming the other way, or aborts the process in tcp_cm.c / tcp_iface.c. Sending
// from one worker to the peer's receiving worker keeps every pair of workers one-way.
#ifndef REFIT_TRANSPORT_UCX_WORKER_H_
#define REFIT_TRANSPORT_UCX_WORKER_H_

#include <ucp/api/ucp.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace refit::transport {

// Turns a UCX status into an absl::Status naming the call.
absl::Status UcxStatus(ucs_status_t status, const char* call);

class UcxEndpoint;

// A UCX operation in flight; UcxWorker::WaitAll finishes a set of them.
struct PendingOperation {
  void* request = nullptr;  // null: completed at once
  bool receive = false;
  size_t length = 0;                // bytes received, once complete
  std::string what;                 // for errors
  UcxEndpoint* endpoint = nullptr;  // sends: force-closed if the send cannot be cancelled
};

class UcxWorker {
 public:
  // `name` shows up in UCX's own diagnostics.
  static absl::StatusOr<std::unique_ptr<UcxWorker>> Create(const std::string& name);
  ~UcxWorker();
  UcxWorker(const UcxWorker&) = delete;
  UcxWorker& operator=(const UcxWorker&) = delete;

  // The receiving worker's address, for peers to connect to.
  const std::string& address() const { return address_; }

  absl::StatusOr<std::unique_ptr<UcxEndpoint>> Connect(const std::string& peer_address);

  // Receives one message with exactly `tag` into `buffer`; returns its length.
  // DEADLINE_EXCEEDED (request cancelled) when none arrives in time.
  absl::StatusOr<size_t> Receive(uint64_t tag, void* buffer, size_t capacity, absl::Time deadline);

  // Posts a receive of one message with exactly `tag`; finish it with WaitAll.
  absl::StatusOr<PendingOperation> PostReceive(uint64_t tag, void* buffer, size_t capacity);

  // Progresses until every operation completes, or cancels what is left at the deadline
  // (or at the first failure, or once the interrupt flag is set: CANCELLED). A send that
  // does not yield to cancelling (a rendezvous with a peer that stopped answering) gets
  // its endpoint force-closed, which ends it. Every request is freed either way.
  // UNAVAILABLE as well (and the rest cancelled) once none of them has finished for
  // `stall_limit`: a dead link that nobody closes ends the wait in bounded time.
  absl::Status WaitAll(std::vector<PendingOperation>* operations, absl::Time deadline,
                       absl::Duration stall_limit = absl::InfiniteDuration());

  // While `*interrupt` is true, every wait ends at once (CANCELLED). Another thread may set
  // it to abort an epoch; null: never interrupted. The flag must outlive the worker's use.
  void SetInterrupt(const std::atomic<bool>* interrupt) { interrupt_ = interrupt; }

  // Operations WaitAll could neither finish nor cancel (a rendezvous whose peer vanished
  // mid-transfer). Their buffers may still be written if the peer comes back, so the
  // owner must destroy this worker (which ends them) before reusing any of that memory.
  int64_t abandoned_operations() const { return abandoned_; }

 private:
  friend class UcxEndpoint;
  UcxWorker(ucp_context_h context, ucp_worker_h receiver, ucp_worker_h sender,
            std::string address)
      : context_(context), receiver_(receiver), sender_(sender), address_(std::move(address)) {}
  // One pass of progress on both workers.
  void Progress();

  ucp_context_h context_;
  ucp_worker_h receiver_;  // receives; its address is the one peers connect to
  ucp_worker_h sender_;    // every endpoint is made from it
  std::string address_;
  const std::atomic<bool>* interrupt_ = nullptr;
  std::atomic<int64_t> abandoned_{0};
};

class UcxEndpoint {
 public:
  ~UcxEndpoint();
  UcxEndpoint(const UcxEndpoint&) = delete;
  UcxEndpoint& operator=(const UcxEndpoint&) = delete;

  // Sends `bytes` of `data` with `tag`; returns once the buffer may be reused.
  absl::Status Send(uint64_t tag, const void* data, size_t bytes, absl::Time deadline);

  // Posts a send; `data` must stay valid until WaitAll finishes it.
  absl::StatusOr<PendingOperation> PostSend(uint64_t tag, const void* data, size_t bytes);

  // True once UCX reported the connection broken (peer gone, timeout) or it was force-
  // closed; a broken endpoint is replaced by a new Connect.
  bool broken() const { return broken_; }

  // Closes the connection at once; operations in flight on it end with an error.
  void ForceClose();

 private:
  friend class UcxWorker;
  explicit UcxEndpoint(UcxWorker* worker) : worker_(worker) {}
  static void OnError(void* self, ucp_ep_h endpoint, ucs_status_t status);

  UcxWorker* worker_;
  ucp_ep_h endpoint_ = nullptr;
  bool broken_ = false;  // set by UCX's error callback, on the worker's thread
};

}  // namespace refit::transport

#endif  // REFIT_TRANSPORT_UCX_WORKER_H_

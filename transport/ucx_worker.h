// UCX for the host data plane between refitd daemons: one UCP context and worker per
// daemon (single-threaded), endpoints to peers by worker address, and tagged messages
// whose every wait has a deadline. Daemons exchange worker addresses through the
// coordinator; UCX picks shared memory, TCP or RDMA verbs underneath.
//
// What UCX 1.13 (Debian 12) cannot take, and refitd therefore never does: when two
// workers hold endpoints to each other, UCX runs both over one TCP connection; closing
// one side's endpoint that was never sent on, after the other side replaced its own,
// silently drops what comes the other way, or aborts the process in tcp_cm.c. refitd
// closes such an endpoint only together with its worker (the worker's address changes,
// so peers connect anew); a sender replaces its own endpoints freely. And a blocking TCP
// connect to a peer whose worker goes away meanwhile aborts the process at the next
// progress, so every worker connects in the background (UcxWorker::Create).
#ifndef REFIT_TRANSPORT_UCX_WORKER_H_
#define REFIT_TRANSPORT_UCX_WORKER_H_

#include <ucp/api/ucp.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "transport/interrupt.h"

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
  // Receives: the vector holding the buffer. If the receive can be neither finished nor
  // cancelled, the worker takes the vector's storage over (the vector is left empty) and
  // keeps it until UCX ends the receive, so a late write cannot land in freed memory.
  std::vector<uint8_t>* buffer_owner = nullptr;
  // Memory owned elsewhere (a staging pool's block) that a receive writes or a send reads:
  // kept alive while UCX may still touch it (a lingering receive, an abandoned send); its
  // owner must not reuse it meanwhile (StagingPool::Abandon).
  std::shared_ptr<void> memory_owner;
};

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
  // The same into all of `*buffer`, which the worker keeps if the receive cannot end (see
  // PendingOperation::buffer_owner).
  absl::StatusOr<size_t> Receive(uint64_t tag, std::vector<uint8_t>* buffer, absl::Time deadline);

  // Posts a receive of one message with exactly `tag`; finish it with WaitAll.
  absl::StatusOr<PendingOperation> PostReceive(uint64_t tag, void* buffer, size_t capacity);

  // Progresses until every operation completes, or cancels what is left at the deadline
  // (or at the first failure, or once the interrupt flag is set: CANCELLED). A send that
  // does not yield to cancelling (a rendezvous with a peer that stopped answering) gets
  // its endpoint force-closed, which ends it. Every request is freed either way.
  // UNAVAILABLE as well (and the rest cancelled) once none of them has finished for
  // `stall_limit`: a dead link that nobody closes ends the wait in bounded time. A wait
  // that is not `interruptible` ignores the interrupt flag (what must be waited for even
  // while an epoch is aborted, within its deadline).
  absl::Status WaitAll(std::vector<PendingOperation>* operations, absl::Time deadline,
                       absl::Duration stall_limit = absl::InfiniteDuration(),
                       bool interruptible = true);

  // Runs what UCX has pending (at most a few milliseconds' worth) without waiting for
  // anything: a connection that broke while the worker was idle (a peer that restarted or
  // went away between epochs) is found and its endpoint marked broken(), so the owner
  // replaces it before an epoch sends on it, instead of that epoch failing at its first
  // send ("ucp_tag_send_nbx: Endpoint timeout").
  void ProgressPending();

  // While `interrupt` is raised, every interruptible wait ends at once (CANCELLED, with its
  // reason); a raise wakes a wait asleep on the worker's events. Null: never interrupted.
  // The interrupt must outlive the worker.
  void SetInterrupt(const Interrupt* interrupt);

  // Operations WaitAll could neither finish nor cancel (a rendezvous whose peer vanished
  // mid-transfer) and that are not lingering receives (sends, receives without a
  // buffer_owner or memory_owner). UCX may still touch their memory if the peer comes
  // back: a memory_owner is kept with them, otherwise the owner must destroy this worker
  // before reusing any of it.
  int64_t abandoned_operations() const { return abandoned_; }

  // Receives WaitAll could neither finish nor cancel, kept with their buffers until UCX
  // ends them (the peer's connection fails or comes back); each progress reaps the ended.
  size_t lingering_receives() const { return lingering_.size(); }

  // Endpoints WaitAll force-closed because a send would not yield to cancelling. UCX
  // 1.13's TCP transport keeps state for such an endpoint that a later connection between
  // the same workers can trip over (a crash inside uct_tcp_cm_insert_ep, seen after a dead
  // link came back): the owner replaces the worker after an epoch that did this.
  int64_t endpoints_force_closed() const { return force_closed_; }

 private:
  friend class UcxEndpoint;
  UcxWorker(ucp_context_h context, ucp_worker_h worker, std::string address, int event_fd)
      : context_(context), worker_(worker), address_(std::move(address)), event_fd_(event_fd) {}
  absl::StatusOr<size_t> ReceiveOne(uint64_t tag, void* buffer, size_t capacity,
                                    std::vector<uint8_t>* buffer_owner, absl::Time deadline);
  // One pass of progress; frees the lingering receives that ended. Whether UCX did anything.
  bool Progress();
  // With nothing done since `last_activity` for a moment, sleeps until the worker has an
  // event, the interrupt is raised (its listener signals the worker), `deadline` or
  // `stall_end` comes, at most 10 ms (see the .cc), so a daemon waiting on its peers leaves
  // the cores to the copies instead of spinning on one.
  void SleepIfIdle(std::chrono::steady_clock::time_point last_activity, absl::Time deadline,
                   std::chrono::steady_clock::time_point stall_end);
  // Whether no request this worker gave up on is still running (so destroying it is safe).
  bool NothingLeftRunning();

  ucp_context_h context_;
  ucp_worker_h worker_;
  std::string address_;
  int event_fd_ = -1;  // the worker's wakeup descriptor (UCX owns it); -1: none, spin
  const Interrupt* interrupt_ = nullptr;
  Interrupt::Listening interrupt_listening_;  // signals worker_; released before it goes
  std::atomic<int64_t> abandoned_{0};
  int64_t force_closed_ = 0;
  struct Lingering {
    void* request;
    std::vector<uint8_t> buffer;   // where UCX may still write
    std::shared_ptr<void> memory;  // or there
  };
  std::vector<Lingering> lingering_;
  std::vector<void*> abandoned_requests_;                // never freed: UCX may still complete them
  std::vector<std::shared_ptr<void>> abandoned_memory_;  // their memory_owners
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
  // Whether ForceClose ran (nothing can be sent on it any more).
  bool closed() const { return endpoint_ == nullptr; }

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

#include "transport/ucx_worker.h"

#include <poll.h>

#include <algorithm>
#include <chrono>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "spdlog/spdlog.h"
#include "transport/data_plane_address.h"

namespace refit::transport {

absl::Status UcxStatus(ucs_status_t status, const char* call) {
  if (status == UCS_OK) return absl::OkStatus();
  const std::string text = absl::StrCat(call, ": ", ucs_status_string(status));
  switch (status) {
    case UCS_ERR_CANCELED:
      return absl::CancelledError(text);
    case UCS_ERR_TIMED_OUT:
    case UCS_ERR_ENDPOINT_TIMEOUT:
      return absl::DeadlineExceededError(text);
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_REJECTED:
      return absl::UnavailableError(text);
    case UCS_ERR_MESSAGE_TRUNCATED:
      return absl::OutOfRangeError(text);
    case UCS_ERR_NO_MEMORY:
      return absl::ResourceExhaustedError(text);
    default:
      return absl::InternalError(text);
  }
}

absl::StatusOr<std::unique_ptr<UcxWorker>> UcxWorker::Create(const std::string& name) {
  ucp_config_t* config = nullptr;
  absl::Status status = UcxStatus(ucp_config_read(nullptr, nullptr, &config), "ucp_config_read");
  if (!status.ok()) return status;
  // Non-blocking TCP connects, always (over UCX_TCP_CONN_NB too). With blocking ones, UCX
  // 1.13 aborts the process when a peer's worker goes away while we connect to it: the
  // connect is accepted, the connection request meets a reset, the retry is refused,
  // and the endpoint is marked failed before ucp_ep_create gives it its send side; the
  // next progress then trips `tcp_ep.c:478 Assertion !(ep->flags & ..._TX)`. Connected
  // in the background, the same failure reaches the endpoint's error handler instead.
  // ucx_worker_test's ConnectingToAPeerThatGoesAwayMeanwhile... reproduces it. The key is
  // the transport's own ("CONN_NB"): UCP hands unknown keys to every transport's config,
  // and "TCP_CONN_NB" would match none.
  status = UcxStatus(ucp_config_modify(config, "CONN_NB", "y"), "ucp_config_modify");
  if (!status.ok()) {
    ucp_config_release(config);
    return status;
  }
  ucp_params_t params = {};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
  // Wakeup: a worker with nothing to do sleeps on its event descriptor (WaitAll).
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  params.name = name.c_str();
  ucp_context_h context = nullptr;
  status = UcxStatus(ucp_init(&params, config, &context), "ucp_init");
  ucp_config_release(config);
  if (!status.ok()) return status;

  ucp_worker_params_t worker_params = {};
  worker_params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  worker_params.thread_mode = UCS_THREAD_MODE_SINGLE;
  ucp_worker_h worker = nullptr;
  status = UcxStatus(ucp_worker_create(context, &worker_params, &worker), "ucp_worker_create");
  if (!status.ok()) {
    ucp_cleanup(context);
    return status;
  }
  int event_fd = -1;  // UCX's; never closed here
  if (ucp_worker_get_efd(worker, &event_fd) != UCS_OK) event_fd = -1;
  ucp_address_t* address = nullptr;
  size_t length = 0;
  status = UcxStatus(ucp_worker_get_address(worker, &address, &length), "ucp_worker_get_address");
  if (!status.ok()) {
    ucp_worker_destroy(worker);
    ucp_cleanup(context);
    return status;
  }
  std::string bytes =
      SealDataPlaneAddress(std::string_view(reinterpret_cast<const char*>(address), length));
  ucp_worker_release_address(worker, address);
  return std::unique_ptr<UcxWorker>(new UcxWorker(context, worker, std::move(bytes), event_fd));
}

void UcxWorker::SetInterrupt(const Interrupt* interrupt) {
  interrupt_listening_ = Interrupt::Listening();
  interrupt_ = interrupt;
  if (interrupt_ == nullptr || event_fd_ < 0) return;
  // ucp_worker_signal may be called from any thread (UCX's documentation says so).
  interrupt_listening_ = interrupt_->Listen([worker = worker_]() { ucp_worker_signal(worker); });
}

UcxWorker::~UcxWorker() {
  interrupt_listening_ = Interrupt::Listening();  // no signal to a worker being destroyed
  // UCX aborts the process (an assertion in Debian's build) when a worker is destroyed
  // with a rendezvous still running on it, so give what lingers a moment to end, and
  // otherwise leave the worker (and the memory it may write) alone for good.
  const absl::Time give_up = absl::Now() + absl::Seconds(1);
  while (!NothingLeftRunning() && absl::Now() < give_up) Progress();
  if (!NothingLeftRunning()) {
    spdlog::error(
        "UCX: {} receives and {} other operations still running; leaving the data-plane "
        "worker undestroyed (its sockets stay open until the process exits)",
        lingering_.size(), abandoned_requests_.size());
    for (Lingering& lingering : lingering_) {
      new std::vector<uint8_t>(std::move(lingering.buffer));
      new std::shared_ptr<void>(std::move(lingering.memory));
    }
    new std::vector<std::shared_ptr<void>>(std::move(abandoned_memory_));
    return;
  }
  ucp_worker_destroy(worker_);
  ucp_cleanup(context_);
}

bool UcxWorker::Progress() {
  const bool progressed = ucp_worker_progress(worker_) > 0;
  for (size_t i = 0; i < lingering_.size();) {
    if (ucp_request_check_status(lingering_[i].request) == UCS_INPROGRESS) {
      ++i;
      continue;
    }
    ucp_request_free(lingering_[i].request);
    lingering_[i] = std::move(lingering_.back());
    lingering_.pop_back();
  }
  return progressed;
}

void UcxWorker::SleepIfIdle(std::chrono::steady_clock::time_point last_activity,
                            absl::Time deadline, std::chrono::steady_clock::time_point stall_end) {
  // A short spin first: a message in flight usually completes within it.
  constexpr auto kSpin = std::chrono::microseconds(100);
  const auto now = std::chrono::steady_clock::now();
  if (event_fd_ < 0 || now - last_activity < kSpin) return;
  // Only past the spin: the wall clock is read on the way to sleep, not on every pass.
  const auto wake_by = std::min(
      stall_end,
      now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                absl::ToChronoNanoseconds(std::min(deadline - absl::Now(), absl::Hours(24)))));
  if (now >= wake_by) return;
  // UCS_ERR_BUSY: events came meanwhile (an interrupt's signal among them), progress them
  // first. A signal after the arm wakes the poll.
  if (ucp_worker_arm(worker_) != UCS_OK) return;
  // Rounded up, so the wait does not wake just short of its deadline and spin to it. At
  // most 10 ms: UCX does not signal the descriptor for every event. An endpoint's failure
  // that its async thread finds is one: with a 1 s cap, ucx_worker_test's sends to a
  // vanished peer often ran to their deadline (that test took 10.4 s instead of 4.9 s).
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                        wake_by - now + std::chrono::microseconds(999))
                        .count();
  pollfd event = {event_fd_, POLLIN, 0};
  poll(&event, 1, static_cast<int>(std::min<int64_t>(left, 10)));
}

void UcxWorker::ProgressPending() {
  // UCX reports an endpoint's failure through a callback it queues for a later pass, so
  // keep going while passes do something, and one more after.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::milliseconds(5);
  while (Progress() && std::chrono::steady_clock::now() < give_up) {
  }
  Progress();
}

bool UcxWorker::NothingLeftRunning() {
  if (!lingering_.empty()) return false;
  for (void* request : abandoned_requests_) {
    if (ucp_request_check_status(request) == UCS_INPROGRESS) return false;
  }
  return true;
}

absl::Status UcxWorker::WaitAll(std::vector<PendingOperation>* operations, absl::Time deadline,
                                absl::Duration stall_limit, bool interruptible) {
  absl::Status result;
  auto status_of = [](const PendingOperation& op, ucp_tag_recv_info_t* info) {
    return op.receive ? ucp_tag_recv_request_test(op.request, info)
                      : ucp_request_check_status(op.request);
  };
  size_t pending = 0;
  for (const PendingOperation& op : *operations) pending += op.request != nullptr;
  // Steady time: a wall-clock step must not look like a stall.
  auto last_finished = std::chrono::steady_clock::now();
  const auto stall = stall_limit == absl::InfiniteDuration()
                         ? std::chrono::steady_clock::duration::max()
                         : std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                               absl::ToChronoNanoseconds(stall_limit));
  auto last_activity = last_finished;
  while (pending > 0) {
    if (Progress()) last_activity = std::chrono::steady_clock::now();
    for (PendingOperation& op : *operations) {
      if (op.request == nullptr) continue;
      ucp_tag_recv_info_t info = {};
      const ucs_status_t status = status_of(op, &info);
      if (status == UCS_INPROGRESS) continue;
      if (op.receive) op.length = info.length;
      ucp_request_free(op.request);
      op.request = nullptr;
      --pending;
      last_finished = last_activity = std::chrono::steady_clock::now();
      if (result.ok()) result = UcxStatus(status, op.what.c_str());
    }
    if (pending > 0 && result.ok()) {
      SleepIfIdle(last_activity, deadline,
                  stall == std::chrono::steady_clock::duration::max()
                      ? std::chrono::steady_clock::time_point::max()
                      : last_finished + stall);
    }
    if (pending > 0 && result.ok() && interruptible && interrupt_ != nullptr &&
        interrupt_->raised()) {
      result = absl::CancelledError(absl::StrCat("interrupted (", interrupt_->reason(), ") with ",
                                                 pending, " UCX operations unfinished"));
    }
    if (pending > 0 && result.ok() && std::chrono::steady_clock::now() - last_finished > stall) {
      std::vector<std::string> waiting;
      for (const PendingOperation& op : *operations) {
        if (op.request != nullptr && waiting.size() < 4) waiting.push_back(op.what);
      }
      result = absl::UnavailableError(absl::StrCat(
          "no data-plane operation finished for ", absl::ToInt64Milliseconds(stall_limit),
          " ms (a dead link?); still waiting for ", absl::StrJoin(waiting, ", "),
          pending > waiting.size() ? absl::StrCat(" and ", pending - waiting.size(), " more")
                                   : ""));
    }
    if (pending > 0 && (!result.ok() || absl::Now() > deadline)) {
      if (result.ok()) {
        result = absl::DeadlineExceededError(
            absl::StrCat(pending, " UCX operations unfinished at the deadline, first: ", [&]() {
              for (const PendingOperation& op : *operations) {
                if (op.request != nullptr) return op.what;
              }
              return std::string();
            }()));
      }
      for (PendingOperation& op : *operations) {
        if (op.request != nullptr) ucp_request_cancel(worker_, op.request);
      }
      // What a cancel cannot end within a moment, closing its endpoint does.
      const absl::Time grace = absl::Now() + absl::Milliseconds(100);
      const absl::Time give_up = absl::Now() + absl::Seconds(2);
      for (PendingOperation& op : *operations) {
        if (op.request == nullptr) continue;
        while (ucp_request_check_status(op.request) == UCS_INPROGRESS && absl::Now() < give_up) {
          Progress();
          if (absl::Now() > grace && op.endpoint != nullptr && !op.endpoint->closed()) {
            op.endpoint->ForceClose();
            ++force_closed_;
          }
        }
        if (ucp_request_check_status(op.request) != UCS_INPROGRESS) {
          ucp_request_free(op.request);
        } else if (op.receive && (op.buffer_owner != nullptr || op.memory_owner != nullptr)) {
          // UCX may still write into its buffer: the worker keeps both until it ends.
          spdlog::warn("UCX: {} would not end; keeping its buffer until it does", op.what);
          Lingering& lingering = lingering_.emplace_back();
          lingering.request = op.request;
          if (op.buffer_owner != nullptr) {
            lingering.buffer = std::move(*op.buffer_owner);
            op.buffer_owner->clear();
          }
          lingering.memory = std::move(op.memory_owner);
        } else {
          // Freeing it would let UCX touch memory the caller is about to free or unmap;
          // only destroying the worker ends it for sure (see abandoned_operations()).
          spdlog::error("UCX: {} would not end; leaving it", op.what);
          abandoned_requests_.push_back(op.request);
          if (op.memory_owner != nullptr) abandoned_memory_.push_back(std::move(op.memory_owner));
          ++abandoned_;
        }
        op.request = nullptr;
      }
      pending = 0;
    }
  }
  return result;
}

absl::StatusOr<PendingOperation> UcxWorker::PostReceive(uint64_t tag, void* buffer,
                                                        size_t capacity) {
  // Always get a request (no immediate completion), so the length comes one way.
  ucp_request_param_t params = {};
  params.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  void* request = ucp_tag_recv_nbx(worker_, buffer, capacity, tag, ~uint64_t{0}, &params);
  if (UCS_PTR_IS_ERR(request)) return UcxStatus(UCS_PTR_STATUS(request), "ucp_tag_recv_nbx");
  return PendingOperation{request, true, 0, absl::StrCat("receive of UCX message tag ", tag)};
}

absl::StatusOr<std::unique_ptr<UcxEndpoint>> UcxWorker::Connect(const std::string& peer_address) {
  // Checked before UCX parses it: UCX trusts the bytes, and a malformed address crashes.
  absl::StatusOr<std::string> ucx_address = OpenDataPlaneAddress(peer_address);
  if (!ucx_address.ok()) return ucx_address.status();
  ucp_ep_params_t params = {};
  auto endpoint = std::unique_ptr<UcxEndpoint>(new UcxEndpoint(this));
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.address = reinterpret_cast<const ucp_address_t*>(ucx_address->data());
  params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  params.err_handler.cb = &UcxEndpoint::OnError;
  params.err_handler.arg = endpoint.get();
  absl::Status status =
      UcxStatus(ucp_ep_create(worker_, &params, &endpoint->endpoint_), "ucp_ep_create");
  if (!status.ok()) {
    endpoint->endpoint_ = nullptr;
    return status;
  }
  return endpoint;
}

void UcxEndpoint::OnError(void* self, ucp_ep_h, ucs_status_t status) {
  auto* endpoint = static_cast<UcxEndpoint*>(self);
  endpoint->broken_ = true;
  spdlog::debug("UCX endpoint to a peer broke: {}", ucs_status_string(status));
}

absl::StatusOr<size_t> UcxWorker::Receive(uint64_t tag, std::vector<uint8_t>* buffer,
                                          absl::Time deadline) {
  return ReceiveOne(tag, buffer->data(), buffer->size(), buffer, deadline);
}

absl::StatusOr<size_t> UcxWorker::Receive(uint64_t tag, void* buffer, size_t capacity,
                                          absl::Time deadline) {
  return ReceiveOne(tag, buffer, capacity, nullptr, deadline);
}

absl::StatusOr<size_t> UcxWorker::ReceiveOne(uint64_t tag, void* buffer, size_t capacity,
                                             std::vector<uint8_t>* buffer_owner,
                                             absl::Time deadline) {
  absl::StatusOr<PendingOperation> posted = PostReceive(tag, buffer, capacity);
  if (!posted.ok()) return posted.status();
  posted->buffer_owner = buffer_owner;
  std::vector<PendingOperation> operations = {*posted};
  absl::Status status = WaitAll(&operations, deadline);
  if (!status.ok()) return status;
  return operations[0].length;
}

UcxEndpoint::~UcxEndpoint() { ForceClose(); }

void UcxEndpoint::ForceClose() {
  if (endpoint_ == nullptr) return;
  broken_ = true;
  ucp_request_param_t params = {};
  params.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  params.flags = UCP_EP_CLOSE_FLAG_FORCE;
  void* request = ucp_ep_close_nbx(endpoint_, &params);
  endpoint_ = nullptr;
  if (request == nullptr || UCS_PTR_IS_ERR(request)) return;
  // Progressed here rather than through WaitAll, which may be what called this.
  const absl::Time give_up = absl::Now() + absl::Seconds(5);
  while (ucp_request_check_status(request) == UCS_INPROGRESS && absl::Now() < give_up) {
    worker_->Progress();
  }
  if (ucp_request_check_status(request) != UCS_INPROGRESS) ucp_request_free(request);
}

absl::StatusOr<PendingOperation> UcxEndpoint::PostSend(uint64_t tag, const void* data,
                                                       size_t bytes) {
  if (endpoint_ == nullptr) {
    return absl::FailedPreconditionError("the UCX endpoint was closed after a failure");
  }
  ucp_request_param_t params = {};
  void* request = ucp_tag_send_nbx(endpoint_, data, bytes, tag, &params);
  if (UCS_PTR_IS_ERR(request)) return UcxStatus(UCS_PTR_STATUS(request), "ucp_tag_send_nbx");
  return PendingOperation{request, false, 0, absl::StrCat("send of UCX message tag ", tag), this};
}

absl::Status UcxEndpoint::Send(uint64_t tag, const void* data, size_t bytes, absl::Time deadline) {
  absl::StatusOr<PendingOperation> posted = PostSend(tag, data, bytes);
  if (!posted.ok()) return posted.status();
  std::vector<PendingOperation> operations = {*posted};
  return worker_->WaitAll(&operations, deadline);
}

}  // namespace refit::transport

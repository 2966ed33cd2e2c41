// Two UCX workers, standing for two daemons, exchange tagged messages on this machine
// (UCX picks shared memory or TCP on loopback); every wait ends by its deadline.
#include "transport/ucx_worker.h"

#include <sys/mman.h>
#include <sys/wait.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "transport/data_plane_address.h"

namespace refit::transport {
namespace {

TEST(UcxWorkerTest, LargeAndSmallMessagesArriveIntact) {
  auto receiver = UcxWorker::Create("receiver");
  ASSERT_TRUE(receiver.ok()) << receiver.status();
  const std::string address = (*receiver)->address();
  std::vector<uint8_t> big(32 << 20);
  std::iota(big.begin(), big.end(), 7);
  std::thread sender([&]() {
    auto worker = UcxWorker::Create("sender");
    ASSERT_TRUE(worker.ok()) << worker.status();
    auto endpoint = (*worker)->Connect(address);
    ASSERT_TRUE(endpoint.ok()) << endpoint.status();
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    EXPECT_TRUE((*endpoint)->Send(/*tag=*/2, "hello", 5, deadline).ok());
    EXPECT_TRUE((*endpoint)->Send(/*tag=*/1, big.data(), big.size(), deadline).ok());
  });
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  std::vector<uint8_t> got(big.size());
  absl::StatusOr<size_t> length = (*receiver)->Receive(1, got.data(), got.size(), deadline);
  ASSERT_TRUE(length.ok()) << length.status();
  EXPECT_EQ(*length, big.size());
  EXPECT_EQ(got, big);
  char small[16] = {};
  length = (*receiver)->Receive(2, small, sizeof(small), deadline);
  ASSERT_TRUE(length.ok()) << length.status();
  EXPECT_EQ(std::string(small, *length), "hello");
  sender.join();
}

TEST(UcxWorkerTest, ASendToAPeerThatStoppedAnsweringEndsAtTheInterrupt) {
  // The receiver never progresses (a SIGSTOPped daemon): a large send cannot finish and
  // cannot simply be cancelled; the interrupt still ends it, by closing the endpoint.
  auto receiver = UcxWorker::Create("stopped");
  ASSERT_TRUE(receiver.ok()) << receiver.status();
  auto sender = UcxWorker::Create("sender");
  ASSERT_TRUE(sender.ok()) << sender.status();
  Interrupt interrupt;
  (*sender)->SetInterrupt(&interrupt);
  auto endpoint = (*sender)->Connect((*receiver)->address());
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  std::vector<uint8_t> big(64 << 20, 1);
  std::thread interrupter([&]() {
    absl::SleepFor(absl::Milliseconds(300));
    interrupt.Raise("the coordinator aborted the epoch");
  });
  const absl::Time start = absl::Now();
  const absl::Status sent =
      (*endpoint)->Send(/*tag=*/9, big.data(), big.size(), absl::Now() + absl::Seconds(60));
  interrupter.join();
  EXPECT_EQ(sent.code(), absl::StatusCode::kCancelled) << sent;
  EXPECT_TRUE(absl::StrContains(sent.message(), "the coordinator aborted the epoch")) << sent;
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  // The endpoint is not used again: the next epoch connects anew.
  EXPECT_TRUE((*endpoint)->broken());
  EXPECT_FALSE((*endpoint)->PostSend(9, big.data(), 8).ok());
}

TEST(UcxWorkerTest, OperationsThatStandStillEndAtTheStallLimitLongBeforeTheDeadline) {
  // A dead link nobody closes: the receiver never progresses, nothing finishes. The send
  // ends once it has stood still for the stall limit, though its deadline is a minute off.
  auto receiver = UcxWorker::Create("stalled");
  ASSERT_TRUE(receiver.ok()) << receiver.status();
  auto sender = UcxWorker::Create("sender");
  ASSERT_TRUE(sender.ok()) << sender.status();
  auto endpoint = (*sender)->Connect((*receiver)->address());
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  std::vector<uint8_t> big(64 << 20, 1);
  const absl::Time start = absl::Now();
  absl::StatusOr<PendingOperation> send = (*endpoint)->PostSend(/*tag=*/9, big.data(), big.size());
  ASSERT_TRUE(send.ok()) << send.status();
  std::vector<PendingOperation> sends = {*send};
  const absl::Status sent =
      (*sender)->WaitAll(&sends, absl::Now() + absl::Seconds(60), absl::Milliseconds(300));
  EXPECT_EQ(sent.code(), absl::StatusCode::kUnavailable) << sent;
  EXPECT_NE(sent.message().find("no data-plane operation finished for 300 ms"), std::string::npos)
      << sent;
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(300));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  // The send would not yield to cancelling: its endpoint was force-closed, and the worker
  // counts it (its owner replaces the worker after such an epoch).
  EXPECT_TRUE((*endpoint)->closed());
  EXPECT_EQ((*sender)->endpoints_force_closed(), 1);
  EXPECT_EQ((*receiver)->endpoints_force_closed(), 0);
  // A receive whose sender never comes ends the same way.
  char buffer[8];
  absl::StatusOr<PendingOperation> receive = (*receiver)->PostReceive(10, buffer, sizeof(buffer));
  ASSERT_TRUE(receive.ok()) << receive.status();
  std::vector<PendingOperation> receives = {*receive};
  const absl::Status received =
      (*receiver)->WaitAll(&receives, absl::Now() + absl::Seconds(60), absl::Milliseconds(200));
  EXPECT_EQ(received.code(), absl::StatusCode::kUnavailable) << received;
}

// What two daemon processes share for the endpoint-replacement test: the inference
// side's address (it changes with its worker), and how far each got, one round at a time.
struct SharedRounds {
  char address[2][4096];
  std::atomic<int> address_length[2];
  std::atomic<int> address_generation[2];  // bumped with every new worker
  std::atomic<int> rounds_ready[2];        // the inference side set up round N-1
  std::atomic<int> rounds_done[2];         // by the trainer (sent) and the inference side
  std::atomic<bool> failed;                // either gave up: the other stops waiting
};

// One daemon of the endpoint-replacement test, in its own process: 0 the trainer (sends
// every round), 1 the inference side (holds an endpoint back, never sent on, as refitd
// does to every peer it receives from). Before a round, `replaces[round]` says what is
// replaced the way refitd replaces things: bit 0, the trainer's endpoint alone (a send
// that had to be force-closed); bit 1, the inference side's worker with its endpoint (a
// receive that would not end). Returns what went wrong, or "" once every message arrived.
std::string RunReplacingDaemon(int self, SharedRounds* shared, const std::vector<int>& replaces) {
  const int peer = 1 - self;
  std::unique_ptr<UcxWorker> worker;
  std::unique_ptr<UcxEndpoint> endpoint;
  auto new_worker = [&]() -> std::string {
    endpoint.reset();  // endpoints before their worker
    worker.reset();
    auto made = UcxWorker::Create(self == 0 ? "trainer" : "inference");
    if (!made.ok()) return made.status().ToString();
    worker = std::move(*made);
    const std::string& own = worker->address();
    if (own.size() > sizeof(shared->address[self])) return "address too long";
    std::memcpy(shared->address[self], own.data(), own.size());
    shared->address_length[self] = static_cast<int>(own.size());
    ++shared->address_generation[self];
    return "";
  };
  const absl::Time give_up = absl::Now() + absl::Seconds(60);
  auto wait_for = [&](std::atomic<int>* counter, int value) {
    while (counter->load() < value) {
      if (shared->failed.load() || absl::Now() > give_up) return false;
      absl::SleepFor(absl::Microseconds(200));  // no progress meanwhile, as between epochs
    }
    return true;
  };
  if (std::string made = new_worker(); !made.empty()) return made;
  int connected_generation = 0;  // of the peer's address this side's endpoint goes to
  for (int round = 0; round < static_cast<int>(replaces.size()); ++round) {
    if (!wait_for(&shared->rounds_done[peer], round) ||
        (self == 0 && !wait_for(&shared->rounds_ready[1], round + 1)) ||
        !wait_for(&shared->address_generation[peer], 1)) {
      return absl::StrCat("round ", round, ": the peer gave up or fell behind");
    }
    if (self == 1 && round > 0 && (replaces[round] & 2) != 0) {
      if (std::string made = new_worker(); !made.empty()) return made;
    }
    const int generation = shared->address_generation[peer].load();
    if (endpoint == nullptr || generation != connected_generation ||
        (self == 0 && (replaces[round] & 1) != 0)) {
      endpoint.reset();  // force-closed
      auto connected =
          worker->Connect(std::string(shared->address[peer], shared->address_length[peer].load()));
      if (!connected.ok()) return connected.status().ToString();
      endpoint = std::move(*connected);
      connected_generation = generation;
    }
    if (self == 1) shared->rounds_ready[1] = round + 1;
    uint64_t payload = round;
    const absl::Time deadline = absl::Now() + absl::Seconds(5);
    if (self == 0) {
      absl::Status sent = endpoint->Send(round, &payload, sizeof(payload), deadline);
      if (!sent.ok()) return absl::StrCat("round ", round, ": ", sent.ToString());
    } else {
      payload = ~uint64_t{0};
      absl::StatusOr<size_t> length = worker->Receive(round, &payload, sizeof(payload), deadline);
      if (!length.ok()) return absl::StrCat("round ", round, ": ", length.status().ToString());
      if (payload != static_cast<uint64_t>(round))
        return absl::StrCat("round ", round, ": bad bytes");
    }
    shared->rounds_done[self] = round + 1;
  }
  wait_for(&shared->rounds_done[peer], static_cast<int>(replaces.size()));
  return "";
}

TEST(UcxWorkerTest, EndpointsAndWorkersReplacedTheWayRefitdDoesLoseNothing) {
  // Two daemon processes each hold an endpoint to the other, as the trainer and an
  // inference node do (the inference side never sends on its own), and replace them the
  // way refitd does after failed epochs. Every message the trainer sends must arrive.
  // (Separate processes: UCX's connection handling differs from one process to another.)
  constexpr int kRounds = 150;
  std::vector<int> replaces(kRounds);
  std::mt19937 random(12345);
  for (int& what : replaces) what = std::uniform_int_distribution<int>(0, 3)(random);
  void* mapped = mmap(nullptr, sizeof(SharedRounds), PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mapped, MAP_FAILED);
  auto* shared = new (mapped) SharedRounds{};
  pid_t children[2];
  for (int self = 0; self < 2; ++self) {
    children[self] = fork();
    ASSERT_GE(children[self], 0);
    if (children[self] == 0) {
      const std::string failure = RunReplacingDaemon(self, shared, replaces);
      if (!failure.empty()) shared->failed = true;
      if (!failure.empty()) {
        fprintf(stderr, "%s: %s\n", self == 0 ? "trainer" : "inference", failure.c_str());
      }
      _exit(failure.empty() ? 0 : 1);
    }
  }
  for (int self = 0; self < 2; ++self) {
    int status = 0;
    ASSERT_EQ(waitpid(children[self], &status, 0), children[self]);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << (self == 0 ? "trainer" : "inference") << " process: "
        << (WIFSIGNALED(status) ? absl::StrCat("killed by signal ", WTERMSIG(status))
                                : absl::StrCat("exit code ", WEXITSTATUS(status)));
  }
  munmap(mapped, sizeof(SharedRounds));
}

// A sender that starts a large (rendezvous) send to `receiver` and then stops answering
// without closing anything, as a daemon behind a dead link does; raw UCX, so that nothing
// of the worker under test runs on its side.
class StalledSender {
 public:
  explicit StalledSender(const std::string& sealed_address, size_t bytes) : data_(bytes, 3) {
    ucp_config_t* config = nullptr;
    EXPECT_EQ(ucp_config_read(nullptr, nullptr, &config), UCS_OK);
    ucp_params_t params = {};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_TAG;
    EXPECT_EQ(ucp_init(&params, config, &context_), UCS_OK);
    ucp_config_release(config);
    ucp_worker_params_t worker_params = {};
    EXPECT_EQ(ucp_worker_create(context_, &worker_params, &worker_), UCS_OK);
    absl::StatusOr<std::string> address = OpenDataPlaneAddress(sealed_address);
    EXPECT_TRUE(address.ok()) << address.status();
    ucp_ep_params_t ep_params = {};
    ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    ep_params.address = reinterpret_cast<const ucp_address_t*>(address->data());
    ep_params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    EXPECT_EQ(ucp_ep_create(worker_, &ep_params, &endpoint_), UCS_OK);
    ucp_request_param_t send_params = {};
    request_ = ucp_tag_send_nbx(endpoint_, data_.data(), data_.size(), /*tag=*/5, &send_params);
    EXPECT_FALSE(UCS_PTR_IS_ERR(request_));
  }
  // Progress for a moment: the send's first message (its rendezvous request) goes out.
  void Start() {
    const absl::Time until = absl::Now() + absl::Milliseconds(200);
    while (absl::Now() < until) ucp_worker_progress(worker_);
  }
  // Closes the connection at last (its socket goes away), and everything with it.
  ~StalledSender() {
    ucp_request_param_t params = {};
    params.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    params.flags = UCP_EP_CLOSE_FLAG_FORCE;
    void* closing = ucp_ep_close_nbx(endpoint_, &params);
    for (void* request : {closing, request_}) {
      if (request == nullptr || UCS_PTR_IS_ERR(request)) continue;
      while (ucp_request_check_status(request) == UCS_INPROGRESS) ucp_worker_progress(worker_);
      ucp_request_free(request);
    }
    ucp_worker_destroy(worker_);
    ucp_cleanup(context_);
  }

 private:
  std::vector<uint8_t> data_;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  ucp_ep_h endpoint_ = nullptr;
  void* request_ = nullptr;
};

// Receives the stalled sender's message until the stall limit gives up on it. Both sides
// progress for a moment first, so the send's rendezvous request waits at the receiver;
// the receive posted after it matches at once and then waits for data that never comes.
absl::Status ReceiveFromStalled(StalledSender* sender, UcxWorker* receiver,
                                std::vector<uint8_t>* buffer,
                                std::shared_ptr<uint8_t> memory_owner = nullptr,
                                size_t memory_bytes = 0) {
  std::thread starting([&]() { sender->Start(); });
  char unused[8];
  while (
      receiver->Receive(99, unused, sizeof(unused), absl::Now() + absl::Milliseconds(300)).ok()) {
  }
  starting.join();
  absl::StatusOr<PendingOperation> posted =
      memory_owner != nullptr ? receiver->PostReceive(5, memory_owner.get(), memory_bytes)
                              : receiver->PostReceive(5, buffer->data(), buffer->size());
  if (!posted.ok()) return posted.status();
  if (memory_owner != nullptr) {
    posted->memory_owner = std::move(memory_owner);
  } else {
    posted->buffer_owner = buffer;
  }
  std::vector<PendingOperation> operations = {*posted};
  return receiver->WaitAll(&operations, absl::Now() + absl::Seconds(30), absl::Milliseconds(300));
}

// Progresses `worker` (through short receives of nothing) until no receive lingers, for
// at most 20 seconds.
void ProgressWhileReceivesLinger(UcxWorker* worker) {
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  char unused[8];
  while (worker->lingering_receives() > 0 && absl::Now() < give_up) {
    worker->Receive(99, unused, sizeof(unused), absl::Now() + absl::Milliseconds(50)).IgnoreError();
  }
}

TEST(UcxWorkerTest, AReceiveThatCannotEndKeepsItsBufferUntilUcxEndsIt) {
  auto receiver = UcxWorker::Create("receiver");
  ASSERT_TRUE(receiver.ok()) << receiver.status();
  auto sender = std::make_unique<StalledSender>((*receiver)->address(), 64 << 20);
  std::vector<uint8_t> buffer(64 << 20);
  const absl::Status received = ReceiveFromStalled(sender.get(), receiver->get(), &buffer);
  EXPECT_EQ(received.code(), absl::StatusCode::kUnavailable) << received;
  // The buffer now belongs to the worker: the caller's vector is empty, nothing abandoned.
  EXPECT_TRUE(buffer.empty());
  EXPECT_EQ((*receiver)->lingering_receives(), 1u);
  EXPECT_EQ((*receiver)->abandoned_operations(), 0);
  // The sender goes away: UCX fails the receive, and the worker lets it go.
  sender.reset();
  ProgressWhileReceivesLinger(receiver->get());
  EXPECT_EQ((*receiver)->lingering_receives(), 0u);
}

TEST(UcxWorkerTest, AReceiveIntoAStagingBlockThatCannotEndKeepsTheBlockAlive) {
  auto receiver = UcxWorker::Create("receiver");
  ASSERT_TRUE(receiver.ok()) << receiver.status();
  auto sender = std::make_unique<StalledSender>((*receiver)->address(), 64 << 20);
  // A staging pool's block: the pool drops its reference after the failed batch.
  std::shared_ptr<uint8_t> block(new uint8_t[64 << 20], std::default_delete<uint8_t[]>());
  const std::weak_ptr<uint8_t> watched = block;
  const absl::Status received =
      ReceiveFromStalled(sender.get(), receiver->get(), nullptr, std::move(block), 64 << 20);
  EXPECT_EQ(received.code(), absl::StatusCode::kUnavailable) << received;
  EXPECT_EQ((*receiver)->lingering_receives(), 1u);
  EXPECT_EQ((*receiver)->abandoned_operations(), 0);
  EXPECT_FALSE(watched.expired());  // UCX may still write into it: the worker holds it
  sender.reset();
  ProgressWhileReceivesLinger(receiver->get());
  EXPECT_EQ((*receiver)->lingering_receives(), 0u);
  EXPECT_TRUE(watched.expired());  // let go once UCX ended the receive
}

TEST(UcxWorkerTest, AWorkerWithAReceiveThatCannotEndIsDroppedWithoutAborting) {
  // UCX 1.13 (Debian's build) asserts when a worker is destroyed under a running
  // rendezvous: refitd dropping its worker after a dead link must not take the process.
  auto receiver = UcxWorker::Create("receiver");
  ASSERT_TRUE(receiver.ok()) << receiver.status();
  StalledSender sender((*receiver)->address(), 64 << 20);
  std::vector<uint8_t> buffer(64 << 20);
  EXPECT_EQ(ReceiveFromStalled(&sender, receiver->get(), &buffer).code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ((*receiver)->lingering_receives(), 1u);
  receiver->reset();  // still running: left undestroyed, and the process lives on
}

// A peer daemon that restarts while this one connects to it: its worker goes away between
// our TCP connect and our connection request. With UCX's blocking connects this aborted the
// process at the next progress (UCX 1.13, `tcp_ep.c:478`); UcxWorker::Create makes them
// non-blocking, and the failure is the endpoint's. Without that, this aborts within about
// 150 of the 500 tries (it crashed in 6 of 6 runs of a standalone loop of the same race).
TEST(UcxWorkerTest, ConnectingToAPeerThatGoesAwayMeanwhileFailsThatEndpointOnly) {
  auto worker = UcxWorker::Create("survivor");
  ASSERT_TRUE(worker.ok()) << worker.status();
  std::mt19937 random(7);
  int connected = 0, refused = 0;
  for (int attempt = 0; attempt < 500; ++attempt) {
    auto peer = UcxWorker::Create("restarting");
    ASSERT_TRUE(peer.ok()) << peer.status();
    const std::string address = (*peer)->address();
    const auto goes_after = std::chrono::microseconds(random() % 400);
    std::thread goes_away([&]() {
      std::this_thread::sleep_for(goes_after);
      peer->reset();
    });
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    absl::StatusOr<std::unique_ptr<UcxEndpoint>> endpoint = (*worker)->Connect(address);
    goes_away.join();
    if (!endpoint.ok()) {
      ++refused;
      continue;
    }
    ++connected;
    // The send to the vanished peer fails (or ends at its deadline); either way it ends,
    // and the worker's progress meanwhile runs whatever UCX queued on the failed connect.
    const char byte = 1;
    EXPECT_FALSE((*endpoint)->Send(3, &byte, 1, absl::Now() + absl::Milliseconds(300)).ok());
  }
  EXPECT_GT(connected, 0) << refused;
  // The worker still connects and delivers to a live peer.
  auto live = UcxWorker::Create("live");
  ASSERT_TRUE(live.ok()) << live.status();
  auto endpoint = (*worker)->Connect((*live)->address());
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  std::thread sender([&]() {
    EXPECT_TRUE((*endpoint)->Send(4, "alive", 5, absl::Now() + absl::Seconds(20)).ok());
  });
  std::vector<uint8_t> received(5);
  absl::StatusOr<size_t> length = (*live)->Receive(4, &received, absl::Now() + absl::Seconds(20));
  sender.join();
  ASSERT_TRUE(length.ok()) << length.status();
  EXPECT_EQ(std::string(received.begin(), received.end()), "alive");
}

// A peer that goes away while this worker sits idle (between epochs): its endpoint does not
// know until the worker progresses; ProgressPending finds out, so the owner replaces the
// endpoint before an epoch sends on it.
TEST(UcxWorkerTest, AConnectionThatBrokeWhileIdleIsFoundBeforeTheNextSend) {
  auto worker = UcxWorker::Create("idle");
  ASSERT_TRUE(worker.ok()) << worker.status();
  auto peer = UcxWorker::Create("goes-away");
  ASSERT_TRUE(peer.ok()) << peer.status();
  auto endpoint = (*worker)->Connect((*peer)->address());
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  std::thread sender([&]() {
    EXPECT_TRUE((*endpoint)->Send(5, "epoch", 5, absl::Now() + absl::Seconds(20)).ok());
  });
  std::vector<uint8_t> received(5);
  ASSERT_TRUE((*peer)->Receive(5, &received, absl::Now() + absl::Seconds(20)).ok());
  sender.join();
  peer->reset();
  absl::SleepFor(absl::Milliseconds(200));  // the peer's sockets are closed by now
  EXPECT_FALSE((*endpoint)->broken());      // nothing progressed the worker since
  (*worker)->ProgressPending();
  EXPECT_TRUE((*endpoint)->broken());
}

TEST(UcxWorkerTest, ReceiveWithoutSenderEndsAtTheDeadline) {
  auto worker = UcxWorker::Create("lonely");
  ASSERT_TRUE(worker.ok()) << worker.status();
  char buffer[8];
  const absl::Time start = absl::Now();
  absl::StatusOr<size_t> length =
      (*worker)->Receive(9, buffer, sizeof(buffer), start + absl::Milliseconds(200));
  EXPECT_EQ(length.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
}

TEST(UcxWorkerTest, TooSmallBufferIsAnError) {
  auto receiver = UcxWorker::Create("receiver");
  ASSERT_TRUE(receiver.ok());
  const std::string address = (*receiver)->address();
  std::thread sender([&]() {
    auto worker = UcxWorker::Create("sender");
    ASSERT_TRUE(worker.ok());
    auto endpoint = (*worker)->Connect(address);
    ASSERT_TRUE(endpoint.ok());
    std::vector<uint8_t> data(1024, 1);
    // The receiver rejects it; the send itself may complete or fail, but must not hang.
    (*endpoint)->Send(3, data.data(), data.size(), absl::Now() + absl::Seconds(5)).IgnoreError();
  });
  char small[16];
  absl::StatusOr<size_t> length =
      (*receiver)->Receive(3, small, sizeof(small), absl::Now() + absl::Seconds(10));
  EXPECT_FALSE(length.ok());
  sender.join();
}

TEST(UcxWorkerTest, EmptyOrGarbageAddressesAreRejectedBeforeUcxParsesThem) {
  auto worker = UcxWorker::Create("w");
  ASSERT_TRUE(worker.ok());
  EXPECT_EQ((*worker)->Connect("").status().code(), absl::StatusCode::kInvalidArgument);
  // Bytes that UCX would take for an address (its own format with a bogus body) crash
  // ucp_ep_create; here they are an error and the worker still connects afterwards.
  std::string garbage = (*worker)->address();
  for (size_t i = garbage.size() / 2; i < garbage.size(); ++i) garbage[i] ^= 0x5a;
  EXPECT_EQ((*worker)->Connect(garbage).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*worker)->Connect(std::string(512, '\x7f')).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto peer = UcxWorker::Create("peer");
  ASSERT_TRUE(peer.ok());
  EXPECT_TRUE((*worker)->Connect((*peer)->address()).ok());
}

}  // namespace
}  // namespace refit::transport

// Two UCX workers, standing for two daemons, exchange tagged messages on this machine
// (UCX picks shared memory or TCP on loopback); every wait ends by its deadline.
#include "transport/ucx_worker.h"

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

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
  std::atomic<bool> interrupt{false};
  (*sender)->SetInterrupt(&interrupt);
  auto endpoint = (*sender)->Connect((*receiver)->address());
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  std::vector<uint8_t> big(64 << 20, 1);
  std::thread interrupter([&]() {
    absl::SleepFor(absl::Milliseconds(300));
    interrupt = true;
  });
  const absl::Time start = absl::Now();
  const absl::Status sent =
      (*endpoint)->Send(/*tag=*/9, big.data(), big.size(), absl::Now() + absl::Seconds(60));
  interrupter.join();
  EXPECT_EQ(sent.code(), absl::StatusCode::kCancelled) << sent;
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
  // A receive whose sender never comes ends the same way.
  char buffer[8];
  absl::StatusOr<PendingOperation> receive = (*receiver)->PostReceive(10, buffer, sizeof(buffer));
  ASSERT_TRUE(receive.ok()) << receive.status();
  std::vector<PendingOperation> receives = {*receive};
  const absl::Status received =
      (*receiver)->WaitAll(&receives, absl::Now() + absl::Seconds(60), absl::Milliseconds(200));
  EXPECT_EQ(received.code(), absl::StatusCode::kUnavailable) << received;
}

// What two daemon processes share for the endpoint-replacement test: addresses, and how
// far each got (one round at a time, so each round's replacements happen between messages).
struct SharedRounds {
  char address[2][4096];
  std::atomic<int> address_length[2];
  std::atomic<int> rounds_done[2];  // by the trainer (sent) and the inference side (received)
  std::atomic<bool> failed;         // either gave up: the other stops waiting
};

// One daemon of the endpoint-replacement test, in its own process: 0 the trainer (sends
// every round), 1 the inference side (holds an endpoint back it never sends on). Before a
// round, `replaces[round]` says who replaces its endpoint: bit 0 the trainer, bit 1 the
// inference side. Returns what went wrong, or "" once every round's message arrived.
std::string RunReplacingDaemon(int self, SharedRounds* shared, const std::vector<int>& replaces) {
  auto worker = UcxWorker::Create(self == 0 ? "trainer" : "inference");
  if (!worker.ok()) return worker.status().ToString();
  const std::string& own = (*worker)->address();
  if (own.size() > sizeof(shared->address[self])) return "address too long";
  std::memcpy(shared->address[self], own.data(), own.size());
  shared->address_length[self] = static_cast<int>(own.size());
  const int peer = 1 - self;
  const absl::Time give_up = absl::Now() + absl::Seconds(60);
  auto wait_for = [&](int who, int rounds) {
    while (shared->rounds_done[who].load() < rounds) {
      if (shared->failed.load() || absl::Now() > give_up) return false;
      absl::SleepFor(absl::Microseconds(200));  // no progress meanwhile, as between epochs
    }
    return true;
  };
  while (shared->address_length[peer].load() == 0) {
    if (absl::Now() > give_up) return "the peer never said its address";
    absl::SleepFor(absl::Milliseconds(1));
  }
  const std::string peer_address(shared->address[peer], shared->address_length[peer].load());
  std::unique_ptr<UcxEndpoint> endpoint;
  for (int round = 0; round < static_cast<int>(replaces.size()); ++round) {
    if (!wait_for(peer, round)) return absl::StrCat("round ", round, ": the peer gave up or fell behind");
    if (endpoint == nullptr || (replaces[round] & (1 << self)) != 0) {
      endpoint.reset();  // force-closed
      auto connected = (*worker)->Connect(peer_address);
      if (!connected.ok()) return connected.status().ToString();
      endpoint = std::move(*connected);
    }
    uint64_t payload = round;
    const absl::Time deadline = absl::Now() + absl::Seconds(5);
    if (self == 0) {
      absl::Status sent = endpoint->Send(round, &payload, sizeof(payload), deadline);
      if (!sent.ok()) return absl::StrCat("round ", round, ": ", sent.ToString());
    } else {
      payload = ~uint64_t{0};
      absl::StatusOr<size_t> length =
          (*worker)->Receive(round, &payload, sizeof(payload), deadline);
      if (!length.ok()) return absl::StrCat("round ", round, ": ", length.status().ToString());
      if (payload != static_cast<uint64_t>(round)) return absl::StrCat("round ", round, ": bad bytes");
    }
    shared->rounds_done[self] = round + 1;
  }
  wait_for(peer, static_cast<int>(replaces.size()));
  return "";
}

TEST(UcxWorkerTest, EndpointsReplacedOnEitherSideLoseNothingSentTheOtherWay) {
  // Two daemon processes each hold an endpoint to the other, as the trainer and an
  // inference node do (the inference side never sends on its own). After a failed epoch
  // refitd replaces its endpoints: sometimes both sides, sometimes one alone. Every message
  // the trainer sends must still arrive. With one UCX worker per daemon, UCX 1.13 shares
  // one TCP connection between the two endpoints, and a one-sided close of the idle one
  // silently drops what comes the other way, or aborts the process in tcp_cm.c or
  // tcp_iface.c (separate processes are needed to see it).
  constexpr int kRounds = 150;
  std::vector<int> replaces(kRounds);
  std::mt19937 random(12345);
  for (int& who : replaces) who = std::uniform_int_distribution<int>(0, 3)(random);
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
      if (!failure.empty()) fprintf(stderr, "%s: %s\n", self == 0 ? "trainer" : "inference", failure.c_str());
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

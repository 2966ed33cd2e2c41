// Two UCX workers, standing for two daemons, exchange tagged messages on this machine
// (UCX picks shared memory or TCP on loopback); every wait ends by its deadline.
#include "transport/ucx_worker.h"

#include <atomic>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

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

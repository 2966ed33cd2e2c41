// A burst of connections that would run a daemon out of file descriptors: while it lasts
// the daemon sheds connections (keeping a quarter of its descriptors for its own files),
// once it is gone the daemon must serve again (gRPC's own listener stops for good after
// one "Too many open files"), and the shedding is logged once. Each daemon runs under a
// hard limit of 64 descriptors (prlimit), the burst opens 150 connections.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/testing/layout_builder.h"
#include "proto/refit.grpc.pb.h"
#include "tests/adversarial/processes.h"
#include "transport/testing/backed_layouts.h"

namespace refit::testing {
namespace {

constexpr int kBurst = 150;
const char kPaused[] = "cannot accept a connection (";
const char kResumed[] = "accepting connections again";

int LinesHolding(const std::string& log, const std::string& text) {
  int lines = 0;
  for (absl::string_view line : absl::StrSplit(log, '\n')) lines += line.find(text) != line.npos;
  return lines;
}

// Connections that only connect (the kernel completes them in the listen backlog).
class Burst {
 public:
  Burst(int family, const sockaddr* address, socklen_t length) {
    for (int i = 0; i < kBurst; ++i) {
      const int socket = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (socket < 0) break;
      if (connect(socket, address, length) != 0) {
        close(socket);
        break;
      }
      sockets_.push_back(socket);
    }
  }
  ~Burst() { Close(); }
  void Close() {
    for (int socket : sockets_) close(socket);
    sockets_.clear();
  }
  size_t size() const { return sockets_.size(); }

 private:
  std::vector<int> sockets_;
};

std::vector<std::string> UnderDescriptorLimit(std::vector<std::string> argv) {
  argv.insert(argv.begin(), {"/usr/bin/prlimit", "--nofile=64:64", "--"});  // util-linux
  return argv;
}

class DescriptorExhaustionTest : public ::testing::Test {
 protected:
  void SetUp() override { folder_ = ScratchFolder("refit-nofile"); }
  // refitd under the limit, with no coordinator; returns once its data-plane worker exists
  // (it has tried the absent coordinator).
  std::unique_ptr<ChildProcess> StartRefitd() {
    auto refitd = std::make_unique<ChildProcess>(
        UnderDescriptorLimit({RunfilesPath("refitd/refitd"), "--coordinator=127.0.0.1:1",
                              "--node=a", "--socket=" + socket_path(), "--metrics_port=-1"}),
        folder_ + "/refitd.log");
    EXPECT_FALSE(refitd->AwaitLine("control stream to 127.0.0.1:1 ended", absl::Seconds(20)).empty())
        << refitd->Log();
    return refitd;
  }
  std::string socket_path() const { return folder_ + "/refitd.sock"; }
  std::string folder_;
};

TEST_F(DescriptorExhaustionTest, TheCoordinatorServesAgainOnceABurstThatExhaustedItIsGone) {
  std::ofstream(folder_ + "/job.json") << R"({"name": "nofile", "sourceRanks": 1, "destinationRanks": 1})";
  ChildProcess coordinator(
      UnderDescriptorLimit({RunfilesPath("coordinator/refit-coordinator"), "--listen=127.0.0.1:0",
                            "--job=" + folder_ + "/job.json", "--metrics_port=-1", "--insecure"}),
      folder_ + "/coordinator.log");
  const std::string listening = coordinator.AwaitLine("listening on 127.0.0.1:", absl::Seconds(20));
  ASSERT_FALSE(listening.empty()) << coordinator.Log();
  const std::string address = listening.substr(listening.rfind("127.0.0.1:"));
  int port = 0;
  ASSERT_TRUE(absl::SimpleAtoi(address.substr(address.find(':') + 1), &port)) << address;

  sockaddr_in target{};
  target.sin_family = AF_INET;
  target.sin_port = htons(static_cast<uint16_t>(port));
  target.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  Burst burst(AF_INET, reinterpret_cast<sockaddr*>(&target), sizeof(target));
  ASSERT_EQ(burst.size(), kBurst);
  ASSERT_FALSE(coordinator.AwaitLine(kPaused, absl::Seconds(20)).empty()) << coordinator.Log();
  burst.Close();

  // A fresh client is served within its deadline, and the pause was logged once.
  auto stub = v1::Coordinator::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  context.set_wait_for_ready(true);
  v1::StatusResponse status;
  const grpc::Status served = stub->Status(&context, v1::StatusRequest(), &status);
  EXPECT_TRUE(served.ok()) << served.error_message() << "\n" << coordinator.Log();
  EXPECT_FALSE(coordinator.AwaitLine(kResumed, absl::Seconds(5)).empty()) << coordinator.Log();
  EXPECT_EQ(LinesHolding(coordinator.Log(), kPaused), 1) << coordinator.Log();
  EXPECT_TRUE(coordinator.Alive());
}

TEST_F(DescriptorExhaustionTest, RefitdServesItsSocketAgainOnceABurstThatExhaustedItIsGone) {
  const std::string path = socket_path();
  const std::unique_ptr<ChildProcess> started = StartRefitd();
  ChildProcess& refitd = *started;

  sockaddr_un target{};
  target.sun_family = AF_UNIX;
  std::memcpy(target.sun_path, path.data(), path.size());
  Burst burst(AF_UNIX, reinterpret_cast<sockaddr*>(&target), sizeof(target));
  ASSERT_EQ(burst.size(), kBurst);
  ASSERT_FALSE(refitd.AwaitLine(kPaused, absl::Seconds(20)).empty()) << refitd.Log();
  burst.Close();

  // Any answer from the local API proves it was accepted and served: an empty
  // registration is refused by refitd itself, not by the transport.
  auto stub = v1::LocalDaemon::NewStub(
      grpc::CreateChannel("unix:" + path, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  context.set_wait_for_ready(true);
  v1::RegisterRankResponse response;
  const grpc::Status served = stub->RegisterRank(&context, v1::RegisterRankRequest(), &response);
  EXPECT_EQ(served.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
      << served.error_message() << "\n" << refitd.Log();
  EXPECT_FALSE(refitd.AwaitLine(kResumed, absl::Seconds(5)).empty()) << refitd.Log();
  EXPECT_EQ(LinesHolding(refitd.Log(), kPaused), 1) << refitd.Log();
  EXPECT_TRUE(refitd.Alive());
}

// A rank whose segments would take refitd past its descriptor budget for registrations
// (half its limit) is refused with RESOURCE_EXHAUSTED naming the limit, and the daemon goes
// on serving: a client connects and a small rank registers.
TEST_F(DescriptorExhaustionTest, ARegistrationPastTheDescriptorBudgetIsRefusedNamingTheLimit) {
  const std::unique_ptr<ChildProcess> started = StartRefitd();
  ChildProcess& refitd = *started;
  auto stub = v1::LocalDaemon::NewStub(
      grpc::CreateChannel("unix:" + socket_path(), grpc::InsecureChannelCredentials()));
  transport::testing::BackedLayouts backed;
  // One segment per row of a [rows, 8] tensor, each its own buffer.
  auto request_of = [&](int64_t rank, int64_t rows) {
    refit::testing::LayoutBuilder builder;
    builder.Tensor("w" + std::to_string(rank), {rows, 8}).Rank(rank, "a", 0);
    for (int64_t row = 0; row < rows; ++row) {
      builder.View(rank, "w" + std::to_string(rank), {row, 0}, {1, 8});
    }
    const v1::LayoutSpec spec = backed.Back(builder.spec(), "destination");
    v1::RegisterRankRequest request;
    request.set_role(v1::ROLE_DESTINATION);
    *request.mutable_layout() = spec.ranks(0);
    *request.mutable_tensors() = spec.tensors();
    return request;
  };
  auto registered = [&](const v1::RegisterRankRequest& request) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    context.set_wait_for_ready(true);
    v1::RegisterRankResponse response;
    return stub->RegisterRank(&context, request, &response);
  };
  const grpc::Status refused = registered(request_of(0, 40));
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << refused.error_message() << "\n" << refitd.Log();
  EXPECT_THAT(refused.error_message(),
              ::testing::HasSubstr("destination rank 0: its 40 shared-memory segments would take "
                                   "refitd to"));
  EXPECT_THAT(refused.error_message(), ::testing::HasSubstr("(half of the 64 allowed"));
  const grpc::Status small = registered(request_of(1, 2));
  EXPECT_TRUE(small.ok()) << small.error_message() << "\n" << refitd.Log();
  EXPECT_TRUE(refitd.Alive());
}

}  // namespace
}  // namespace refit::testing

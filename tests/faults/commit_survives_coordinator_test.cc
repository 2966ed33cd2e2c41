// The commit is all or nothing across the destination ranks, even when the coordinator
// dies in the middle of sending it. Real processes: three refitd (a trainer node and two
// inference nodes, one destination rank each, the second staged) and, for each version, a
// coordinator that dies just before or just after one of its commit messages (each point
// of the commit in turn, in a shuffled order), then a real refit-coordinator started on
// the same address. Both destination ranks must end up agreeing: both told the version
// arrived (and holding its bytes) or both told it was aborted (the staged one holding its
// previous version's bytes); neither is left waiting.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "planner/testing/layout_builder.h"
#include "proto/refit.grpc.pb.h"
#include "tests/adversarial/processes.h"
#include "transport/shared_memory.h"
#include "transport/testing/backed_layouts.h"

namespace refit::testing {
namespace {

constexpr int kElements = 16 * 8;  // tensor "w", F32
const char* const kNodes[] = {"train-0", "infer-0", "infer-1"};

std::chrono::system_clock::time_point In(absl::Duration d) {
  return std::chrono::system_clock::now() + absl::ToChronoMilliseconds(d);
}

class CommitFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    folder_ = ScratchFolder("refit-commit");
    ASSERT_FALSE(folder_.empty());
    // The default lease (5 s): a daemon learns of the coordinator's death from its closed
    // connection, not from the lease, and a shorter lease let a second's stall of a loaded
    // machine cut every daemon in the middle of an epoch.
    std::ofstream(folder_ + "/job.json")
        << R"({"name": "commit", "sourceRanks": 1, "destinationRanks": 2,
               "epochDeadlineMs": 20000})";
  }

  // A coordinator on `port` (0: any), dying at the commit point `flag` ("" : a real one).
  std::unique_ptr<ChildProcess> StartCoordinator(const std::string& flag, int port) {
    const std::string listen = absl::StrCat("--listen=127.0.0.1:", port);
    const std::string job = "--job=" + folder_ + "/job.json";
    std::vector<std::string> argv =
        flag.empty() ? std::vector<std::string>{RunfilesPath("coordinator/refit-coordinator"),
                                                listen, job, "--insecure"}
                     : std::vector<std::string>{
                           RunfilesPath("tests/faults/refit-dying-coordinator"), listen, job, flag};
    auto process = std::make_unique<ChildProcess>(
        argv, absl::StrCat(folder_, "/coordinator-", ++coordinators_, ".log"));
    const std::string line = process->AwaitLine("listening on 127.0.0.1:", absl::Seconds(20));
    EXPECT_FALSE(line.empty()) << process->Log();
    if (port == 0 && !line.empty()) {
      address_ = line.substr(line.rfind("127.0.0.1:"));
      port_ = std::stoi(address_.substr(address_.rfind(':') + 1));
    }
    return process;
  }

  std::unique_ptr<v1::LocalDaemon::Stub> Local(int node) {
    return v1::LocalDaemon::NewStub(grpc::CreateChannel(
        "unix:" + folder_ + "/" + kNodes[node] + ".sock", grpc::InsecureChannelCredentials()));
  }

  // Registers rank `rank` of `role` on node `node`, holding all of "w"; returns its segment.
  std::unique_ptr<transport::SharedMemorySegment> Register(int node, v1::Role role, int64_t rank,
                                                           bool staged) {
    LayoutBuilder builder;
    builder.Tensor("w", {16, 8}).Rank(rank, kNodes[node], -1).View(rank, "w", {0, 0}, {16, 8});
    const v1::LayoutSpec backed = backed_.Back(builder.spec(), "commit");
    v1::RegisterRankRequest request;
    request.set_role(role);
    *request.mutable_layout() = backed.ranks(0);
    request.mutable_layout()->set_staged(staged);
    *request.mutable_tensors() = backed.tensors();
    grpc::Status status;
    for (int attempt = 0; attempt < 200; ++attempt) {  // until refitd listens
      grpc::ClientContext context;
      context.set_deadline(In(absl::Seconds(10)));
      v1::RegisterRankResponse response;
      status = Local(node)->RegisterRank(&context, request, &response);
      if (status.error_code() != grpc::StatusCode::UNAVAILABLE) break;
      absl::SleepFor(absl::Milliseconds(50));
    }
    EXPECT_TRUE(status.ok()) << status.error_message();
    absl::StatusOr<std::unique_ptr<transport::SharedMemorySegment>> segment =
        transport::SharedMemorySegment::Open(backed.ranks(0).buffers(0).shm_name(), kElements * 4);
    EXPECT_TRUE(segment.ok()) << segment.status();
    return segment.ok() ? std::move(*segment) : nullptr;
  }

  static void Fill(transport::SharedMemorySegment* segment, float value) {
    float* data = reinterpret_cast<float*>(segment->data());
    std::fill(data, data + kElements, value);
  }
  // The value every element holds, or -1 if they differ.
  static float Held(transport::SharedMemorySegment* segment) {
    const float* data = reinterpret_cast<const float*>(segment->data());
    for (int i = 1; i < kElements; ++i) {
      if (std::memcmp(&data[i], &data[0], sizeof(float)) != 0) return -1;
    }
    return data[0];
  }

  grpc::Status Publish(int64_t version) {
    grpc::ClientContext context;
    context.set_deadline(In(absl::Seconds(10)));
    v1::PublishRequest request;
    request.set_rank(0);
    request.set_version(version);
    v1::PublishResponse response;
    return Local(0)->Publish(&context, request, &response);
  }

  // Asks for the refit until the group is complete (the daemons are reconnecting and
  // registering again after a coordinator restart); the status of the last try.
  grpc::Status Refit(int64_t version) {
    auto stub =
        v1::Coordinator::NewStub(grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
    const absl::Time give_up = absl::Now() + absl::Seconds(30);
    while (true) {
      grpc::ClientContext context;
      context.set_deadline(In(absl::Seconds(25)));
      // The coordinator was seen listening; a connection attempt that fails on a loaded
      // machine is tried again by the channel within the deadline, not reported as the
      // coordinator's answer.
      context.set_wait_for_ready(true);
      v1::RefitRequest request;
      request.set_version(version);
      request.set_deadline_ms(20000);
      v1::RefitReport report;
      grpc::Status status = stub->Refit(&context, request, &report);
      const bool forming = status.error_code() == grpc::StatusCode::FAILED_PRECONDITION &&
                           status.error_message().find("incomplete") != std::string::npos;
      if (!forming || absl::Now() > give_up) return status;
      absl::SleepFor(absl::Milliseconds(50));
    }
  }

  std::string folder_;
  std::string address_;
  int port_ = 0;
  int coordinators_ = 0;  // started so far; each logs to coordinator-N.log
  transport::testing::BackedLayouts backed_;
};

TEST_F(CommitFaultTest, DestinationRanksAgreeWhereverTheCoordinatorDiesInTheCommit) {
  // Every point of the commit of three daemons, twice, shuffled.
  std::vector<std::string> points;
  for (int round = 0; round < 2; ++round) {
    for (int k = 1; k <= 3; ++k) {
      points.push_back(absl::StrCat("--die_before_commit=", k));
      points.push_back(absl::StrCat("--die_after_commit=", k));
    }
  }
  const unsigned seed = std::random_device()();
  std::shuffle(points.begin(), points.end(), std::mt19937(seed));
  SCOPED_TRACE(absl::StrCat("shuffle seed ", seed));

  std::unique_ptr<ChildProcess> coordinator = StartCoordinator(points[0], 0);
  ASSERT_NE(port_, 0);
  std::vector<std::unique_ptr<ChildProcess>> daemons;
  for (const char* node : kNodes) {
    daemons.push_back(std::make_unique<ChildProcess>(
        std::vector<std::string>{RunfilesPath("refitd/refitd"), "--coordinator=" + address_,
                                 absl::StrCat("--node=", node),
                                 absl::StrCat("--socket=", folder_, "/", node, ".sock"),
                                 "--metrics_port=-1"},
        absl::StrCat(folder_, "/", node, ".log")));
  }
  std::unique_ptr<transport::SharedMemorySegment> source = Register(0, v1::ROLE_SOURCE, 0, false);
  std::unique_ptr<transport::SharedMemorySegment> destination[2] = {
      Register(1, v1::ROLE_DESTINATION, 0, false), Register(2, v1::ROLE_DESTINATION, 1, true)};
  ASSERT_TRUE(source && destination[0] && destination[1]);

  int committed_rounds = 0;
  for (size_t round = 0; round < points.size(); ++round) {
    const int64_t version = static_cast<int64_t>(round) + 1;
    SCOPED_TRACE(absl::StrCat("version ", version, ", coordinator ", points[round]));
    if (round > 0) coordinator = StartCoordinator(points[round], port_);
    Fill(source.get(), static_cast<float>(version));
    // What the staged rank holds before the epoch (poison at first, then the last version
    // committed): an aborted epoch must leave exactly this.
    const std::vector<uint8_t> staged_before(destination[1]->data(),
                                             destination[1]->data() + kElements * 4);
    ASSERT_TRUE(Publish(version).ok());
    // Both destination ranks wait for the version from before the epoch starts.
    grpc::Status waited[2];
    std::vector<std::thread> waiters;
    for (int rank = 0; rank < 2; ++rank) {
      waiters.emplace_back([&, rank]() {
        grpc::ClientContext context;
        context.set_deadline(In(absl::Seconds(60)));
        v1::WaitForVersionRequest request;
        request.set_rank(rank);
        request.set_version(version);
        request.set_deadline_ms(45000);
        v1::WaitForVersionResponse response;
        waited[rank] = Local(rank + 1)->WaitForVersion(&context, request, &response);
      });
    }
    const grpc::Status refit = Refit(version);
    EXPECT_FALSE(refit.ok()) << "the coordinator answered although it died";
    if (coordinator->AwaitExit(absl::Seconds(30)) != 9) {
      std::string daemons_dead;  // the usual reason: a refitd died under the epoch
      for (size_t node = 0; node < daemons.size(); ++node) {
        if (!daemons[node]->Alive()) {
          absl::StrAppend(&daemons_dead, "\nrefitd on ", kNodes[node], " died:\n",
                          daemons[node]->Log());
        }
      }
      ADD_FAILURE() << "the coordinator did not die in the commit: " << refit.error_message()
                    << "\n"
                    << coordinator->Log() << daemons_dead;
      coordinator.reset();
      for (std::thread& waiter : waiters) waiter.join();  // each ends by its deadline
      break;
    }
    // A real coordinator takes its address; the daemons in doubt learn the outcome from it.
    coordinator = StartCoordinator("", port_);
    for (std::thread& waiter : waiters) waiter.join();
    EXPECT_EQ(waited[0].error_code(), waited[1].error_code())
        << "destination rank 0: " << waited[0].error_message()
        << "\ndestination rank 1: " << waited[1].error_message();
    for (int rank = 0; rank < 2; ++rank) {
      EXPECT_TRUE(waited[rank].ok() || waited[rank].error_code() == grpc::StatusCode::ABORTED)
          << "destination rank " << rank << " was left in doubt: " << waited[rank].error_message();
    }
    if (waited[0].ok() && waited[1].ok()) {
      ++committed_rounds;
      EXPECT_EQ(Held(destination[0].get()), static_cast<float>(version));
      EXPECT_EQ(Held(destination[1].get()), static_cast<float>(version));
    } else {
      // Aborted: the staged rank's buffers were never written.
      EXPECT_EQ(std::memcmp(destination[1]->data(), staged_before.data(), staged_before.size()), 0)
          << "an aborted epoch wrote the staged rank's buffers";
    }
    coordinator.reset();  // SIGTERM; the next round's coordinator takes the address
    if (HasFatalFailure()) break;
  }
  // Dying before the first commit message aborts; after one was sent, it commits.
  EXPECT_GT(committed_rounds, 0);
  EXPECT_LT(committed_rounds, static_cast<int>(points.size()));
  for (auto& daemon : daemons) EXPECT_TRUE(daemon->Alive()) << daemon->Log();
}

}  // namespace
}  // namespace refit::testing

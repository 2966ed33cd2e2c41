// Hostile input on the coordinator's port and faults in the data a refit touches: rogue
// daemons (bad hellos, forged registrations), silent streams, connection floods, refits
// with impossible versions, deadlines or cancellations, and segments truncated under a
// registered rank. Each case asserts the named error; the fixture asserts that both
// processes are alive and leaked nothing.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "planner/testing/layout_builder.h"
#include "tests/adversarial/hostile_cluster.h"
#include "transport/shared_memory.h"
#include "transport/ucx_worker.h"

namespace refit::testing {
namespace {

using ::testing::HasSubstr;

class CoordinatorApiTest : public HostileClusterTest {
 protected:
  void ExpectHelloRefused(const v1::DaemonHello& hello, const std::string& fragment) {
    const grpc::Status status = SayHello(hello);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << fragment;
    EXPECT_THAT(status.error_message(), HasSubstr(fragment));
  }
};

TEST_F(CoordinatorApiTest, RefitOfVersionMinusOneIsRefused) {
  const grpc::Status status = Refit(-1, 1000);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("versions are 1 to 2^53"));
}

TEST_F(CoordinatorApiTest, RefitOfVersionZeroIsRefused) {
  EXPECT_EQ(Refit(0, 1000).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(CoordinatorApiTest, RefitOfAHugeVersionIsRefused) {
  EXPECT_EQ(Refit(int64_t{1} << 62, 1000).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(CoordinatorApiTest, AHelloWithNoNodeIsRefused) {
  ExpectHelloRefused(GoodHello(""), "a control stream starts with a hello naming the node");
}

TEST_F(CoordinatorApiTest, AHelloWhoseNodeForgesALogLineIsRefused) {
  ExpectHelloRefused(GoodHello("node-b\n[info] epoch hostile-9 committed"),
                     "holds the character 0xa");
}

TEST_F(CoordinatorApiTest, AHelloWithATenMegabyteNodeNameIsRefused) {
  ExpectHelloRefused(GoodHello(std::string(10 << 20, 'n')), "node name of 10485760 bytes");
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::StatusResponse status;
  ASSERT_TRUE(coordinator_stub_->Status(&context, v1::StatusRequest(), &status).ok());
  EXPECT_LT(status.ByteSizeLong(), 64u << 10) << "a refused name made Status large";
}

TEST_F(CoordinatorApiTest, AHelloWithAGarbageDataPlaneAddressIsRefused) {
  v1::DaemonHello hello = GoodHello("node-b");
  hello.set_data_plane_address(std::string(400, '\x5a'));
  ExpectHelloRefused(hello, "is not a refit UCX address");
}

TEST_F(CoordinatorApiTest, AHelloClaimingAnImpossibleVersionDoesNotMoveTheGroup) {
  const int64_t before = CurrentVersion();
  v1::DaemonHello hello = GoodHello("node-b");
  hello.set_committed_version(int64_t{1} << 62);
  ExpectHelloRefused(hello, "committed version 4611686018427387904 is not a version");
  EXPECT_EQ(CurrentVersion(), before);
}

TEST_F(CoordinatorApiTest, AStreamThatOpensWithoutAHelloIsRefused) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  auto stream = control_stub_->Control(&context);
  v1::DaemonMessage beat;
  beat.mutable_heartbeat();
  stream->Write(beat);
  stream->WritesDone();
  v1::CoordinatorMessage answer;
  while (stream->Read(&answer)) {
  }
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(CoordinatorApiTest, TwoHundredStreamsThatNeverSayHelloAreCutWithinALease) {
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReaderWriter<v1::DaemonMessage, v1::CoordinatorMessage>>>
      streams;
  for (int i = 0; i < 200; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    contexts.back()->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    streams.push_back(control_stub_->Control(contexts.back().get()));
  }
  // Each is ended by the coordinator (lease 1 s, checked every quarter lease).
  const absl::Time start = absl::Now();
  int cut = 0;
  for (auto& stream : streams) {
    v1::CoordinatorMessage answer;
    while (stream->Read(&answer)) {
    }
    cut += stream->Finish().error_code() != grpc::StatusCode::DEADLINE_EXCEEDED;
  }
  EXPECT_EQ(cut, 200);
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_FALSE(coordinator()->AwaitLine("that said no hello", absl::Seconds(1)).empty());
  EXPECT_TRUE(ThreadsSettle());
}

TEST_F(CoordinatorApiTest, ARogueDaemonCannotRegisterRoleNinetyNineOrTakeARankAnotherHolds) {
  // refitd on node-a holds destination rank 0.
  ASSERT_TRUE(Register(GoodRequest(v1::ROLE_DESTINATION, 0)).ok());
  ASSERT_TRUE(CoordinatorHolds(0, 1));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto stream = control_stub_->Control(&context);
  v1::DaemonMessage message;
  *message.mutable_hello() = GoodHello("rogue-node");
  ASSERT_TRUE(stream->Write(message));
  v1::CoordinatorMessage welcome;
  ASSERT_TRUE(stream->Read(&welcome));
  v1::RegisterRankRequest forged = GoodRequest(v1::ROLE_DESTINATION, 0);
  message.Clear();
  message.mutable_register_rank()->set_role(v1::ROLE_DESTINATION);
  *message.mutable_register_rank()->mutable_layout() = forged.layout();
  *message.mutable_register_rank()->mutable_tensors() = forged.tensors();
  ASSERT_TRUE(stream->Write(message));
  message.mutable_register_rank()->set_role(static_cast<v1::Role>(99));
  message.mutable_register_rank()->mutable_layout()->set_rank(5);
  ASSERT_TRUE(stream->Write(message));
  absl::SleepFor(absl::Milliseconds(300));
  grpc::ClientContext layouts_context;
  v1::LayoutsResponse layouts;
  ASSERT_TRUE(coordinator_stub_->Layouts(&layouts_context, v1::LayoutsRequest(), &layouts).ok());
  ASSERT_EQ(layouts.destinations().ranks_size(), 1);
  EXPECT_EQ(layouts.sources().ranks_size(), 0) << "role 99 counted as a source";
  int real = -1;
  for (const v1::DaemonPeer& d : layouts.daemons()) {
    if (d.node() == "node-a") real = d.index();
  }
  ASSERT_EQ(layouts.placement_size(), 1);
  EXPECT_EQ(layouts.placement(0).daemon(), real) << "the rogue daemon took rank 0";
  stream->WritesDone();
  while (stream->Read(&welcome)) {
  }
  stream->Finish();
  ASSERT_TRUE(Deregister(v1::ROLE_DESTINATION, 0).ok());
  // Gone from the coordinator too before the next case: a rank it still thinks node-a
  // holds would refuse the next case's registration of the same rank.
  EXPECT_TRUE(CoordinatorHolds(0, 0));
}

TEST_F(CoordinatorApiTest, ADaemonThatHeartbeatsButStopsReadingIsCutOffWithinALease) {
  // One tensor of 65,536 rows under a 240-character name: refitd on node-a holds it as
  // 65,536 one-element views, apart in memory, so the plan moves it in 65,536 pieces and
  // the plan slice for the destination rank is about 18 MB; a rogue daemon that
  // heartbeats but never reads its stream registers that rank as one view, so its slice
  // cannot be written to it. (The rogue's own registration stays small: a large one takes
  // the coordinator more than the 1 s lease to receive on a loaded 2-core host, and the
  // rogue was cut for silence before it could be cut for not reading.)
  ASSERT_TRUE(CoordinatorHolds(0, 0));  // nobody else holds the rank the rogue takes
  constexpr int kRows = 1 << 16;
  const std::string tensor = std::string(240, 't');
  LayoutBuilder source_layout, destination_layout;
  source_layout.Tensor(tensor, {kRows, 1});
  destination_layout.Tensor(tensor, {kRows, 1});
  source_layout.Rank(0, "node-a", -1).Buffer(0, "b", int64_t{kRows} * 8);
  destination_layout.Rank(0, "stuck-node", -1).Buffer(0, "b", int64_t{kRows} * 4);
  for (int i = 0; i < kRows; ++i) {
    source_layout.View(0, tensor, {i, 0}, {1, 1}, "b", int64_t{i} * 8);
  }
  destination_layout.View(0, tensor, {0, 0}, {kRows, 1}, "b", 0);
  const v1::LayoutSpec source = backed_.Back(source_layout.spec(), "stuck");
  v1::RegisterRankRequest source_request;
  source_request.set_role(v1::ROLE_SOURCE);
  *source_request.mutable_layout() = source.ranks(0);
  *source_request.mutable_tensors() = source.tensors();
  ASSERT_TRUE(Register(source_request).ok());
  // A real data-plane address (a worker that never progresses): node-a may connect to it.
  absl::StatusOr<std::unique_ptr<transport::UcxWorker>> worker =
      transport::UcxWorker::Create("stuck-node");
  ASSERT_TRUE(worker.ok()) << worker.status();
  grpc::ClientContext context;
  auto stream = control_stub_->Control(&context);
  v1::DaemonMessage message;
  *message.mutable_hello() = GoodHello("stuck-node");
  message.mutable_hello()->set_data_plane_address((*worker)->address());
  ASSERT_TRUE(stream->Write(message));
  v1::CoordinatorMessage welcome;
  ASSERT_TRUE(stream->Read(&welcome));
  message.Clear();
  message.mutable_register_rank()->set_role(v1::ROLE_DESTINATION);
  *message.mutable_register_rank()->mutable_layout() = destination_layout.spec().ranks(0);
  *message.mutable_register_rank()->mutable_tensors() = destination_layout.spec().tensors();
  ASSERT_TRUE(stream->Write(message));
  absl::Mutex mu;
  bool stop = false;
  std::thread heartbeat([&]() {
    v1::DaemonMessage beat;
    beat.mutable_heartbeat();
    absl::MutexLock lock(&mu);
    while (!mu.AwaitWithTimeout(absl::Condition(&stop), absl::Milliseconds(100))) {
      if (!stream->Write(beat)) break;
    }
  });
  // Once the coordinator holds the rogue's registration the group is complete, and its plan
  // slices go out ahead of the first epoch: the rogue's cannot be written to it, and it is
  // cut within its lease.
  const absl::Time start = absl::Now();
  const std::string cut = "refitd on stuck-node left a message unread for 1000 ms (its lease)";
  for (int i = 0; i < 500 && !absl::StrContains(coordinator()->Log(), cut); ++i) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  const absl::Duration took = absl::Now() - start;
  {
    absl::MutexLock lock(&mu);
    stop = true;
  }
  heartbeat.join();
  context.TryCancel();
  stream->Finish();
  EXPECT_THAT(coordinator()->Log(), HasSubstr(cut));
  // A lease (1 s) and the quarter lease between checks, not a refit's 30 s deadline.
  EXPECT_LT(took, absl::Seconds(10));
  // Its rank left with it: a refit says so at once, and is not held up by the rogue.
  const int64_t version = NextVersion();
  ASSERT_TRUE(Publish(0, version).ok());
  const grpc::Status refit = Refit(version, 30000);
  EXPECT_EQ(refit.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << refit.error_message();
  EXPECT_THAT(refit.error_message(), HasSubstr("missing destination ranks 0"));
  ASSERT_TRUE(Deregister(v1::ROLE_SOURCE, 0).ok());
}

TEST_F(CoordinatorApiTest, WatchingAnUnknownEpochIsNotFound) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::WatchEpochRequest request;
  request.set_epoch_id("no-such-epoch");
  request.set_timeout_ms(200);
  auto reader = coordinator_stub_->WatchEpoch(&context, request);
  v1::EpochProgress progress;
  while (reader->Read(&progress)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(CoordinatorApiTest, AThousandTcpConnectsThenGoneLeaveTheCoordinatorAnswering) {
  const std::string& address = coordinator_address();
  int port = 0;
  ASSERT_TRUE(absl::SimpleAtoi(address.substr(address.rfind(':') + 1), &port));
  std::vector<int> sockets;
  for (int i = 0; i < 1000; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) break;  // this test's own descriptor limit
    sockaddr_in target = {};
    target.sin_family = AF_INET;
    target.sin_port = htons(port);
    target.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, reinterpret_cast<sockaddr*>(&target), sizeof(target)) != 0) {
      close(fd);
      break;
    }
    sockets.push_back(fd);
  }
  EXPECT_GE(sockets.size(), 500u);
  for (int fd : sockets) close(fd);
  EXPECT_GE(CurrentVersion(), -1) << "the coordinator stopped answering";
}

// Registers source rank 0 and destination rank 0 (both on node-a), fills the source, and
// waits until the coordinator sees them.
class RefitThroughTest : public HostileClusterTest {
 protected:
  void SetUp() override {
    HostileClusterTest::SetUp();
    source_ = GoodRequest(v1::ROLE_SOURCE, 0);
    destination_ = GoodRequest(v1::ROLE_DESTINATION, 0);
    ASSERT_TRUE(Register(source_).ok());
    ASSERT_TRUE(Register(destination_).ok());
    for (int i = 0; i < 200; ++i) {
      grpc::ClientContext context;
      v1::LayoutsResponse layouts;
      coordinator_stub_->Layouts(&context, v1::LayoutsRequest(), &layouts);
      if (layouts.sources().ranks_size() == 1 && layouts.destinations().ranks_size() == 1) return;
      absl::SleepFor(absl::Milliseconds(20));
    }
    FAIL() << "the coordinator never saw both ranks";
  }
  void TearDown() override {
    Deregister(v1::ROLE_SOURCE, 0);
    Deregister(v1::ROLE_DESTINATION, 0);
    HostileClusterTest::TearDown();
  }
  // Truncates the segment of `request`'s first buffer to `bytes`.
  static void Truncate(const v1::RegisterRankRequest& request, off_t bytes) {
    const int fd = shm_open(request.layout().buffers(0).shm_name().c_str(), O_RDWR, 0);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(ftruncate(fd, bytes), 0);
    close(fd);
  }
  v1::RegisterRankRequest source_, destination_;
};

TEST_F(RefitThroughTest, ADestinationSegmentTruncatedAfterRegistrationFailsTheEpochNotRefitd) {
  const int64_t first = NextVersion();
  ASSERT_TRUE(Publish(0, first).ok());
  const grpc::Status committed = Refit(first, 10000);
  ASSERT_TRUE(committed.ok()) << committed.error_message();
  Truncate(destination_, 0);
  const int64_t second = NextVersion();
  ASSERT_TRUE(Publish(0, second).ok());
  const grpc::Status failed = Refit(second, 10000);
  // refitd's own kind of failure reaches the client: the rank must register again.
  EXPECT_EQ(failed.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(failed.error_message(), HasSubstr("destination rank 0"));
  EXPECT_THAT(failed.error_message(), HasSubstr("was truncated to 0 bytes"));
  EXPECT_EQ(CurrentVersion(), first);
}

TEST_F(RefitThroughTest, ASourceSegmentTruncatedAfterRegistrationFailsTheEpochNotRefitd) {
  Truncate(source_, 64);
  const int64_t version = NextVersion();
  ASSERT_TRUE(Publish(0, version).ok());
  const grpc::Status failed = Refit(version, 10000);
  EXPECT_EQ(failed.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(failed.error_message(), HasSubstr("source rank 0"));
  EXPECT_THAT(failed.error_message(), HasSubstr("was truncated to 64 bytes"));
  // No commit reached the destination: a wait for the version hears of the abort (if it
  // reaches refitd after the wait began) or finds the version not there.
  const grpc::StatusCode waited = WaitForVersion(0, version, 200).error_code();
  EXPECT_TRUE(waited == grpc::StatusCode::ABORTED || waited == grpc::StatusCode::DEADLINE_EXCEEDED)
      << "told it holds a version whose epoch failed: " << waited;
}

TEST_F(RefitThroughTest, ARepeatAfterTheDestinationRegisteredAgainMovesTheVersionAgain) {
  const int64_t version = NextVersion();
  ASSERT_TRUE(Publish(0, version).ok());
  v1::RefitReport first;
  ASSERT_TRUE(Refit(version, 10000, &first).ok());
  ASSERT_TRUE(Deregister(v1::ROLE_DESTINATION, 0).ok());
  destination_ = GoodRequest(v1::ROLE_DESTINATION, 0);  // new, unwritten memory
  ASSERT_TRUE(Register(destination_).ok());
  EXPECT_EQ(WaitForVersion(0, version, 300).error_code(), grpc::StatusCode::DEADLINE_EXCEEDED)
      << "told it holds a version it never received";
  v1::RefitReport again;
  grpc::Status repeated;
  for (int i = 0; i < 50; ++i) {  // until the coordinator has seen the new registration
    repeated = Refit(version, 10000, &again);
    if (repeated.ok() && again.epoch_id() != first.epoch_id()) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_TRUE(repeated.ok()) << repeated.error_message();
  EXPECT_NE(again.epoch_id(), first.epoch_id());
  EXPECT_TRUE(WaitForVersion(0, version, 5000).ok());
}

TEST_F(RefitThroughTest, ARefitWhoseCallerGivesUpFreesTheGroupAtOnce) {
  const int64_t unpublished = NextVersion();
  {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(300));
    v1::RefitRequest request;
    request.set_version(unpublished);
    request.set_deadline_ms(int64_t{1} << 40);  // decades: only the caller's deadline ends it
    v1::RefitReport report;
    EXPECT_EQ(coordinator_stub_->Refit(&context, request, &report).error_code(),
              grpc::StatusCode::DEADLINE_EXCEEDED);
  }
  // The next refit runs at once instead of queueing behind the abandoned one.
  const int64_t next = NextVersion();
  ASSERT_TRUE(Publish(0, next).ok());
  const grpc::Status refit = Refit(next, 5000);
  EXPECT_TRUE(refit.ok()) << refit.error_message();
}

TEST_F(RefitThroughTest, TwoRefitsAtOnceKeepTheirDeadlines) {
  const int64_t held = NextVersion();  // never published: its refit waits
  std::thread holder([&]() { Refit(held, 2000); });
  absl::SleepFor(absl::Milliseconds(200));
  const absl::Time start = absl::Now();
  const grpc::Status second = Refit(NextVersion(), 500);
  EXPECT_EQ(second.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_THAT(second.error_message(),
              HasSubstr(absl::StrCat("waited for a refit of version ", held)));
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(1500));
  holder.join();
}

}  // namespace
}  // namespace refit::testing

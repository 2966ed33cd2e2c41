// The local API over a real unix socket: ranks register real shared-memory buffers, and
// every bad registration is refused with the right code and a message naming the rank.
#include "refitd/local_server.h"

#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/daemon_clients.h"
#include "gtest/gtest.h"
#include "planner/testing/layout_builder.h"
#include "proto/health.grpc.pb.h"
#include "transport/shared_memory.h"
#include "transport/testing/backed_layouts.h"

namespace refit::daemon {
namespace {

class LocalServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Unix socket paths are short (108 bytes): the test's own tmpdir is too deep.
    char dir[] = "/tmp/refitd-test-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    socket_ = dir_ + "/refitd.sock";
    auto server = LocalServer::Start(socket_, &registry_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    stub_ = v1::LocalDaemon::NewStub(
        grpc::CreateChannel("unix:" + socket_, grpc::InsecureChannelCredentials()));
  }

  // A rank holding rows [rank*4, rank*4+4) of a [16, 8] F32 tensor in shared memory.
  v1::RegisterRankRequest Request(v1::Role role, int64_t rank) {
    refit::testing::LayoutBuilder builder;
    builder.Tensor("w", {16, 8}).Rank(rank, "node", 0).View(rank, "w", {rank * 4, 0}, {4, 8});
    v1::RegisterRankRequest request;
    request.set_role(role);
    const v1::LayoutSpec backed = backed_.Back(builder.spec(), "source");
    *request.mutable_layout() = backed.ranks(0);
    *request.mutable_tensors() = backed.tensors();
    return request;
  }

  grpc::Status Register(const v1::RegisterRankRequest& request) {
    grpc::ClientContext context;
    v1::RegisterRankResponse response;
    return stub_->RegisterRank(&context, request, &response);
  }

  grpc::Status Wait(int64_t rank, int64_t version, int64_t deadline_ms,
                    bool ignore_earlier_aborts = false) {
    grpc::ClientContext context;
    v1::WaitForVersionRequest request;
    request.set_rank(rank);
    request.set_version(version);
    request.set_deadline_ms(deadline_ms);
    request.set_ignore_earlier_aborts(ignore_earlier_aborts);
    v1::WaitForVersionResponse response;
    return stub_->WaitForVersion(&context, request, &response);
  }

  void TearDown() override {
    server_.reset();
    unlink((socket_ + ".lock").c_str());
    rmdir(dir_.c_str());
  }

  std::string dir_;
  std::string socket_;
  RankRegistry registry_{"node-a"};
  transport::testing::BackedLayouts backed_;
  std::unique_ptr<LocalServer> server_;
  std::unique_ptr<v1::LocalDaemon::Stub> stub_;
};

TEST_F(LocalServerTest, ASecondDaemonOnALiveSocketRefusesAndAStaleOneIsTakenOver) {
  RankRegistry other("node-b");
  auto second = LocalServer::Start(socket_, &other);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find(absl::StrCat("pid ", getpid())), std::string::npos)
      << second.status();
  // The first still serves its socket.
  ASSERT_TRUE(Register(Request(v1::ROLE_SOURCE, 0)).ok());
  // Once it is gone, its socket file is stale and a new daemon takes it.
  server_.reset();
  auto third = LocalServer::Start(socket_, &other);
  ASSERT_TRUE(third.ok()) << third.status();
  third->reset();  // before `other` goes
}

TEST_F(LocalServerTest, ADepartureAndItsSuccessorsRegistrationAreToldInTheirOrder) {
  // The coordinator link hears of changes made on different threads (a dead rank's hold
  // ending, its restarted process registering): the departure, though slow to deliver,
  // must reach it before the registration that followed it.
  absl::Mutex mu;
  std::vector<RankRegistry::Event::Kind> heard;
  bool delivering_departure = false;
  registry_.SetListener([&](const RankRegistry::Event& event) {
    if (event.kind == RankRegistry::Event::kDeregistered) {
      {
        absl::MutexLock lock(&mu);
        delivering_departure = true;
      }
      absl::SleepFor(absl::Milliseconds(300));
    }
    absl::MutexLock lock(&mu);
    heard.push_back(event.kind);
  });
  ASSERT_TRUE(registry_.Register(Request(v1::ROLE_SOURCE, 0)).ok());
  std::thread departure([&]() { EXPECT_TRUE(registry_.Deregister(v1::ROLE_SOURCE, 0).ok()); });
  {
    absl::MutexLock lock(&mu);
    mu.Await(absl::Condition(&delivering_departure));
  }
  ASSERT_TRUE(registry_.Register(Request(v1::ROLE_SOURCE, 0)).ok());
  departure.join();
  registry_.SetListener(nullptr);
  EXPECT_EQ(heard, (std::vector<RankRegistry::Event::Kind>{RankRegistry::Event::kRegistered,
                                                           RankRegistry::Event::kDeregistered,
                                                           RankRegistry::Event::kRegistered}));
}

TEST_F(LocalServerTest, TheSocketIsTheOwnersOnly) {
  struct stat info;
  ASSERT_EQ(stat(socket_.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600);
}

TEST_F(LocalServerTest, RegistersPublishesAndDeregisters) {
  EXPECT_TRUE(Register(Request(v1::ROLE_SOURCE, 0)).ok());
  EXPECT_TRUE(Register(Request(v1::ROLE_DESTINATION, 1)).ok());
  EXPECT_EQ(registry_.Registrations().size(), 2u);

  grpc::ClientContext publish_context;
  v1::PublishRequest publish;
  publish.set_rank(0);
  publish.set_version(3);
  v1::PublishResponse published;
  EXPECT_TRUE(stub_->Publish(&publish_context, publish, &published).ok());
  EXPECT_EQ(registry_.PublishedVersion(0), 3);

  grpc::ClientContext deregister_context;
  v1::DeregisterRankRequest deregister;
  deregister.set_role(v1::ROLE_SOURCE);
  deregister.set_rank(0);
  v1::DeregisterRankResponse deregistered;
  EXPECT_TRUE(stub_->DeregisterRank(&deregister_context, deregister, &deregistered).ok());
  EXPECT_EQ(registry_.Registrations().size(), 1u);
}

TEST_F(LocalServerTest, BadRegistrationsAreRefused) {
  v1::RegisterRankRequest request = Request(v1::ROLE_SOURCE, 2);
  ASSERT_TRUE(Register(request).ok());
  grpc::Status again = Register(request);
  EXPECT_EQ(again.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_EQ(again.error_message(), "source rank 2 is already registered on node-a");

  v1::RegisterRankRequest unknown_segment = Request(v1::ROLE_SOURCE, 3);
  unknown_segment.mutable_layout()->mutable_buffers(0)->set_shm_name("/refit-no-such-segment");
  grpc::Status status = Register(unknown_segment);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(status.error_message().find("source rank 3: buffer"), std::string::npos);

  v1::RegisterRankRequest too_small = Request(v1::ROLE_SOURCE, 1);
  too_small.mutable_layout()->mutable_buffers(0)->set_bytes(64);  // the view needs 128
  status = Register(too_small);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("outside buffer"), std::string::npos)
      << status.error_message();

  v1::RegisterRankRequest bad_dtype = Request(v1::ROLE_DESTINATION, 0);
  bad_dtype.mutable_tensors(0)->set_dtype("F12");
  status = Register(bad_dtype);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("unknown dtype \"F12\""), std::string::npos);

  v1::RegisterRankRequest outside = Request(v1::ROLE_DESTINATION, 0);
  outside.mutable_layout()->mutable_views(0)->set_offset(0, 14);  // rows 14..18 of 16
  status = Register(outside);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("outside the global shape"), std::string::npos);
}

// Polls until `rank` of `role` is registered (or not), for at most `limit`.
bool AwaitRegistered(const RankRegistry& registry, v1::Role role, int64_t rank, bool registered,
                     absl::Duration limit) {
  const absl::Time give_up = absl::Now() + limit;
  while (true) {
    bool found = false;
    for (const v1::RankRegistration& r : registry.Registrations()) {
      found = found || (r.role() == role && r.layout().rank() == rank);
    }
    if (found == registered) return true;
    if (absl::Now() > give_up) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
}

TEST_F(LocalServerTest, ARankWhoseHoldEndsIsDeregistered) {
  client::LocalDaemonClient client(socket_);
  const v1::RegisterRankRequest request = Request(v1::ROLE_DESTINATION, 2);
  absl::StatusOr<std::string> session =
      client.Register(request.role(), request.layout(), request.tensors());
  ASSERT_TRUE(session.ok()) << session.status();
  absl::StatusOr<std::unique_ptr<client::RegistrationHold>> hold = client.Hold(*session);
  ASSERT_TRUE(hold.ok()) << hold.status();
  // The hold keeps the rank while it lives...
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_TRUE(AwaitRegistered(registry_, v1::ROLE_DESTINATION, 2, true, absl::ZeroDuration()));
  // ...and its end (a closed connection looks the same to refitd) deregisters it, and
  // removes the names of its shared-memory segments: a killed rank leaves none behind.
  hold->reset();
  EXPECT_TRUE(AwaitRegistered(registry_, v1::ROLE_DESTINATION, 2, false, absl::Seconds(5)));
  for (const v1::BufferSpec& buffer : request.layout().buffers()) {
    EXPECT_EQ(transport::SharedMemorySegment::Open(buffer.shm_name(), 1).status().code(),
              absl::StatusCode::kNotFound)
        << buffer.shm_name();
  }

  // The rank can register again (with new segments); an explicit Deregister ends the hold
  // from the daemon's side.
  const v1::RegisterRankRequest again = Request(v1::ROLE_DESTINATION, 2);
  session = client.Register(again.role(), again.layout(), again.tensors());
  ASSERT_TRUE(session.ok()) << session.status();
  hold = client.Hold(*session);
  ASSERT_TRUE(hold.ok()) << hold.status();
  ASSERT_TRUE(client.Deregister(v1::ROLE_DESTINATION, 2).ok());
  const absl::Time start = absl::Now();
  hold->reset();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  // A hold of an ended session, and of one that never existed, is refused.
  EXPECT_EQ(client.Hold(*session).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(client.Hold("node-a/999").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client.Hold("elsewhere/1").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(LocalServerTest, SessionIdsCannotBeGuessed) {
  client::LocalDaemonClient client(socket_);
  std::vector<std::string> sessions;
  for (int64_t rank : {0, 1}) {
    const v1::RegisterRankRequest request = Request(v1::ROLE_SOURCE, rank);
    absl::StatusOr<std::string> session =
        client.Register(request.role(), request.layout(), request.tensors());
    ASSERT_TRUE(session.ok()) << session.status();
    ASSERT_EQ(session->size(), std::string("node-a/").size() + 32) << *session;
    sessions.push_back(*session);
  }
  EXPECT_NE(sessions[0].substr(7, 8), sessions[1].substr(7, 8));
  // Holding a guessed (sequential) id ends no rank's registration.
  for (const char* guess : {"node-a/1", "node-a/2", "node-a/0"}) {
    EXPECT_EQ(client.Hold(guess).status().code(), absl::StatusCode::kNotFound) << guess;
  }
  EXPECT_EQ(registry_.Registrations().size(), 2u);
}

// A rank process that dies and is restarted at once registers again before refitd has
// seen the old connection close: the new registration waits for the old one to go.
TEST_F(LocalServerTest, ARankRestartedRightAfterItsProcessDiedIsNotRefused) {
  client::LocalDaemonClient client(socket_);
  const v1::RegisterRankRequest first = Request(v1::ROLE_DESTINATION, 3);
  absl::StatusOr<std::string> session =
      client.Register(first.role(), first.layout(), first.tensors());
  ASSERT_TRUE(session.ok()) << session.status();
  absl::StatusOr<std::unique_ptr<client::RegistrationHold>> hold = client.Hold(*session);
  ASSERT_TRUE(hold.ok()) << hold.status();
  absl::SleepFor(absl::Milliseconds(200));  // the hold is being watched
  hold->reset();                            // the process dies...
  const v1::RegisterRankRequest second = Request(v1::ROLE_DESTINATION, 3);
  session = client.Register(second.role(), second.layout(), second.tensors());  // ...and is back
  ASSERT_TRUE(session.ok()) << session.status();
  EXPECT_TRUE(AwaitRegistered(registry_, v1::ROLE_DESTINATION, 3, true, absl::ZeroDuration()));
}

TEST_F(LocalServerTest, AnswersTheStandardHealthCheck) {
  auto health = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel("unix:" + socket_, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  grpc::health::v1::HealthCheckResponse response;
  ASSERT_TRUE(health->Check(&context, grpc::health::v1::HealthCheckRequest(), &response).ok());
  EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING);
}

TEST_F(LocalServerTest, WaitForVersionEndsAtItsDeadlineOrOnCommit) {
  ASSERT_TRUE(Register(Request(v1::ROLE_DESTINATION, 1)).ok());
  const absl::Time start = absl::Now();
  grpc::Status status = Wait(1, 5, 200);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_NE(status.error_message().find("destination rank 1 waited for version 5"),
            std::string::npos);
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));

  std::thread committer([&]() {
    absl::SleepFor(absl::Milliseconds(100));
    registry_.BeginEpoch({1});  // an epoch whose plan writes rank 1, ended at once
    registry_.Commit(5);
  });
  EXPECT_TRUE(Wait(1, 5, 5000).ok());
  committer.join();
  EXPECT_EQ(Wait(7, 1, 100).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Wait(1, 6, 0).error_code(), grpc::StatusCode::INVALID_ARGUMENT);  // no deadline
}

// A wait that starts after an epoch moving its version was aborted hears of the abort at
// once, not at its deadline; once another epoch is under way (or the abort is retried at
// once), or for a rank that registered after the abort, it waits as usual.
TEST_F(LocalServerTest, AWaitThatStartsAfterAnAbortHearsOfItAtOnce) {
  ASSERT_TRUE(Register(Request(v1::ROLE_DESTINATION, 1)).ok());
  registry_.BeginEpoch({1});  // ended at once
  registry_.Abort(5, "epoch-9", "source rank 3 went away");
  for (int64_t version : {4, 5}) {
    const absl::Time start = absl::Now();
    const grpc::Status status = Wait(1, version, 10000);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::ABORTED) << status.error_message();
    EXPECT_NE(status.error_message().find("epoch epoch-9 moving version 5 was aborted (source "
                                          "rank 3 went away)"),
              std::string::npos)
        << status.error_message();
    EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  }
  // A later version is not the aborted one's business.
  EXPECT_EQ(Wait(1, 6, 200).error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  // A retry's wait, begun before its epoch, ignores the abort before it, and hears of the
  // next epoch's abort.
  EXPECT_EQ(Wait(1, 5, 200, /*ignore_earlier_aborts=*/true).error_code(),
            grpc::StatusCode::DEADLINE_EXCEEDED);
  std::thread aborter([&]() {
    absl::SleepFor(absl::Milliseconds(100));
    registry_.BeginEpoch({1});
    registry_.Abort(5, "epoch-11", "source rank 2 went away");
  });
  const grpc::Status retried = Wait(1, 5, 10000, /*ignore_earlier_aborts=*/true);
  aborter.join();
  EXPECT_EQ(retried.error_code(), grpc::StatusCode::ABORTED) << retried.error_message();
  EXPECT_NE(retried.error_message().find("epoch epoch-11"), std::string::npos);
  // A rank registered after the abort was not in it.
  ASSERT_TRUE(Register(Request(v1::ROLE_DESTINATION, 2)).ok());
  EXPECT_EQ(Wait(2, 5, 200).error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  // The coordinator retries at once: those waiting keep waiting, and so do new waits.
  registry_.BeginEpoch({1, 2});
  registry_.Abort(5, "epoch-10", "replica 1 was lost", /*retried=*/true);
  EXPECT_EQ(Wait(1, 5, 200).error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  // The retry commits: the version is there.
  registry_.BeginEpoch({1, 2});
  registry_.Commit(5);
  EXPECT_TRUE(Wait(1, 5, 1000).ok());
  EXPECT_TRUE(Wait(2, 5, 1000).ok());
}

TEST_F(LocalServerTest, AStagedRankWhoseCommitCouldNotBeCopiedHearsSoAtOnce) {
  v1::RegisterRankRequest request = Request(v1::ROLE_DESTINATION, 1);
  request.mutable_layout()->set_staged(true);
  ASSERT_TRUE(Register(request).ok());
  registry_.BeginEpoch({1});  // ended at once
  // Its owner shrinks the segment before the commit copies the shadow into it.
  const std::string name = request.layout().buffers(0).shm_name();
  const int fd = shm_open(name.c_str(), O_RDWR, 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 0), 0);
  close(fd);
  registry_.Commit(5);
  const absl::Time start = absl::Now();
  const grpc::Status status = Wait(1, 5, 10000);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DATA_LOSS) << status.error_message();
  EXPECT_NE(status.error_message().find("version 5 was committed but not copied"),
            std::string::npos)
      << status.error_message();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));  // told, not left to its deadline
}

}  // namespace
}  // namespace refit::daemon

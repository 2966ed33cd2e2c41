// CoordinatorLink against a fake coordinator stream (a real gRPC server whose control
// service the test scripts): a session opens with the hello and replays the registry; the
// daemon heartbeats within the lease; an epoch reported done stays in doubt across a lost
// session, is said in the next hello and committed when the coordinator says so; a commit
// of an epoch never reported done is ignored; a pause is answered with its id; Stop ends
// the session.
#include "refitd/coordinator_link.h"

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "proto/refit.grpc.pb.h"
#include "refitd/testing/one_daemon_refit.h"

namespace refit::daemon {
namespace {

// How long a test waits for the daemon to say something before it fails.
constexpr absl::Duration kPatience = absl::Seconds(20);

// The coordinator's side of control streams, scripted by the test: what each session
// received, in order, and messages sent into the newest session.
// Threading: gRPC's handler threads read the streams; the test thread sends and awaits.
class FakeCoordinator final : public v1::CoordinatorControl::Service {
 public:
  using Received = std::pair<int, v1::DaemonMessage>;  // session (from 1), message

  grpc::Status Control(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::CoordinatorMessage, v1::DaemonMessage>* stream) override {
    int session;
    {
      absl::MutexLock lock(&mu_);
      session = ++sessions_;
      context_ = context;
      stream_ = stream;
    }
    v1::DaemonMessage message;
    while (stream->Read(&message)) {
      absl::MutexLock lock(&mu_);
      received_.emplace_back(session, message);
    }
    absl::MutexLock lock(&mu_);
    ended_ = session;
    if (stream_ == stream) {
      stream_ = nullptr;
      context_ = nullptr;
    }
    return grpc::Status::OK;
  }

  // Into the newest session; false when none is open.
  bool Send(const v1::CoordinatorMessage& message) {
    absl::MutexLock lock(&mu_);
    return stream_ != nullptr && stream_->Write(message);
  }
  // Ends the newest session from the coordinator's side (as a crash or a cut would).
  void EndSession() {
    absl::MutexLock lock(&mu_);
    if (context_ != nullptr) context_->TryCancel();
  }
  // The first message of `session` that `match` accepts, once it came (by kPatience).
  std::optional<v1::DaemonMessage> Await(
      int session, const std::function<bool(const v1::DaemonMessage&)>& match) {
    std::optional<v1::DaemonMessage> found;
    auto came = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      for (const Received& r : received_) {
        if (r.first == session && match(r.second)) {
          found = r.second;
          return true;
        }
      }
      return false;
    };
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(&came), kPatience);
    return found;
  }
  // Until `session` received `count` messages (by kPatience); whether it did.
  bool AwaitMessages(int session, int count) {
    absl::MutexLock lock(&mu_);
    auto came = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      int n = 0;
      for (const Received& r : received_) n += r.first == session ? 1 : 0;
      return n >= count;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&came), kPatience);
  }
  // Until `session` ended (by kPatience); whether it did.
  bool AwaitEnd(int session) {
    absl::MutexLock lock(&mu_);
    auto ended = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return ended_ >= session; };
    return mu_.AwaitWithTimeout(absl::Condition(&ended), kPatience);
  }
  // What `session` received so far, in order.
  std::vector<v1::DaemonMessage> MessagesOf(int session) {
    absl::MutexLock lock(&mu_);
    std::vector<v1::DaemonMessage> messages;
    for (const Received& r : received_) {
      if (r.first == session) messages.push_back(r.second);
    }
    return messages;
  }

 private:
  absl::Mutex mu_;
  int sessions_ ABSL_GUARDED_BY(mu_) = 0;
  int ended_ ABSL_GUARDED_BY(mu_) = 0;
  grpc::ServerContext* context_ ABSL_GUARDED_BY(mu_) = nullptr;
  grpc::ServerReaderWriter<v1::CoordinatorMessage, v1::DaemonMessage>* stream_
      ABSL_GUARDED_BY(mu_) = nullptr;
  std::vector<Received> received_ ABSL_GUARDED_BY(mu_);
};

bool IsHello(const v1::DaemonMessage& m) { return m.has_hello(); }

class CoordinatorLinkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(refit_.SetUp(&registry_, "node-a").ok());
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&coordinator_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    link_ =
        std::make_unique<CoordinatorLink>(absl::StrCat("127.0.0.1:", port), "node-a", &registry_);
    link_->Start();
  }
  void TearDown() override {
    link_.reset();  // Stop
    if (server_ != nullptr) server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  }

  void Welcome(int64_t lease_ms) {
    v1::CoordinatorMessage welcome;
    welcome.mutable_welcome()->set_daemon_index(0);
    welcome.mutable_welcome()->set_lease_ms(lease_ms);
    ASSERT_TRUE(coordinator_.Send(welcome));
  }
  // Sends the plan slice and the execute command; the daemon's report.
  v1::EpochDone RunEpoch(int session, bool with_slice) {
    if (with_slice) {
      v1::CoordinatorMessage plan;
      *plan.mutable_plan() = refit_.slice;
      EXPECT_TRUE(coordinator_.Send(plan));
      std::optional<v1::DaemonMessage> prepared =
          coordinator_.Await(session, [](const v1::DaemonMessage& m) { return m.has_prepared(); });
      EXPECT_TRUE(prepared.has_value());
      if (prepared.has_value()) {
        EXPECT_TRUE(prepared->prepared().ok()) << prepared->prepared().error();
        EXPECT_EQ(prepared->prepared().plan_digest(), refit_.slice.digest());
      }
    }
    v1::CoordinatorMessage execute;
    *execute.mutable_execute() = refit_.execute;
    EXPECT_TRUE(coordinator_.Send(execute));
    std::optional<v1::DaemonMessage> done =
        coordinator_.Await(session, [](const v1::DaemonMessage& m) { return m.has_done(); });
    EXPECT_TRUE(done.has_value());
    return done.has_value() ? done->done() : v1::EpochDone();
  }

  RankRegistry registry_{"node-a"};
  testing::OneDaemonRefit refit_;
  FakeCoordinator coordinator_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<CoordinatorLink> link_;
};

TEST_F(CoordinatorLinkTest, ASessionOpensWithTheHelloReplaysTheRanksAndHeartbeatsWithinTheLease) {
  ASSERT_TRUE(coordinator_.Await(1, IsHello).has_value());
  const int ranks = refit_.sources().ranks_size() + refit_.destinations().ranks_size();
  ASSERT_TRUE(coordinator_.AwaitMessages(1, ranks + 1));
  const std::vector<v1::DaemonMessage> said = coordinator_.MessagesOf(1);
  ASSERT_TRUE(said[0].has_hello()) << said[0].DebugString();
  const v1::DaemonHello& hello = said[0].hello();
  EXPECT_EQ(hello.node(), "node-a");
  EXPECT_EQ(hello.incarnation(), link_->incarnation());
  EXPECT_FALSE(hello.data_plane_address().empty());  // the UCX worker's
  EXPECT_EQ(hello.committed_version(), registry_.CommittedVersion());
  EXPECT_TRUE(hello.in_doubt().epoch_id().empty());
  for (int i = 1; i <= ranks; ++i) {
    EXPECT_TRUE(said[i].has_register_rank()) << i << ": " << said[i].DebugString();
  }
  Welcome(/*lease_ms=*/400);
  EXPECT_TRUE(coordinator_.Await(1, [](const v1::DaemonMessage& m) { return m.has_heartbeat(); })
                  .has_value());
}

TEST_F(CoordinatorLinkTest, AnEpochReportedDoneIsInDoubtAcrossALostSessionUntilCommitted) {
  ASSERT_TRUE(coordinator_.Await(1, IsHello).has_value());
  Welcome(5000);
  ASSERT_GT(refit_.WrongDestinationBytes(), 0);
  const v1::EpochDone done = RunEpoch(1, /*with_slice=*/true);
  ASSERT_TRUE(done.ok()) << done.error();
  EXPECT_EQ(done.epoch_id(), "test-1");
  EXPECT_EQ(refit_.WrongDestinationBytes(), 0);

  // The coordinator goes away before its commit: the next session's hello is in doubt.
  coordinator_.EndSession();
  std::optional<v1::DaemonMessage> again = coordinator_.Await(2, IsHello);
  ASSERT_TRUE(again.has_value());
  const v1::InDoubtEpoch& in_doubt = again->hello().in_doubt();
  EXPECT_EQ(in_doubt.epoch_id(), "test-1");
  EXPECT_EQ(in_doubt.version(), 1);
  EXPECT_EQ(std::vector<std::string>(in_doubt.destination_nodes().begin(),
                                     in_doubt.destination_nodes().end()),
            std::vector<std::string>{"node-a"});
  EXPECT_EQ(again->hello().last_epoch_number(), 1u);

  // The coordinator settles it: committed into every destination rank.
  Welcome(5000);
  v1::CoordinatorMessage commit;
  commit.mutable_commit()->set_epoch_id("test-1");
  commit.mutable_commit()->set_version(1);
  ASSERT_TRUE(coordinator_.Send(commit));
  for (const v1::RankLayout& rank : refit_.destinations().ranks()) {
    absl::StatusOr<int64_t> held =
        registry_.WaitForVersion(rank.rank(), 1, absl::Now() + kPatience);
    ASSERT_TRUE(held.ok()) << held.status();
    EXPECT_EQ(*held, 1);
  }
  coordinator_.EndSession();
  std::optional<v1::DaemonMessage> settled = coordinator_.Await(3, IsHello);
  ASSERT_TRUE(settled.has_value());
  EXPECT_TRUE(settled->hello().in_doubt().epoch_id().empty());
  EXPECT_EQ(settled->hello().committed_version(), 1);
  EXPECT_EQ(settled->hello().committed_epoch_id(), "test-1");
}

TEST_F(CoordinatorLinkTest, AFailedEpochIsNotInDoubtAndItsCommitIsIgnored) {
  ASSERT_TRUE(coordinator_.Await(1, IsHello).has_value());
  Welcome(5000);
  const int64_t before = registry_.CommittedVersion();
  const int64_t poisoned = refit_.WrongDestinationBytes();
  const v1::EpochDone done = RunEpoch(1, /*with_slice=*/false);
  EXPECT_FALSE(done.ok());
  EXPECT_EQ(done.code(), static_cast<int>(absl::StatusCode::kFailedPrecondition)) << done.error();
  v1::CoordinatorMessage commit;
  commit.mutable_commit()->set_epoch_id("test-1");
  commit.mutable_commit()->set_version(1);
  ASSERT_TRUE(coordinator_.Send(commit));
  coordinator_.EndSession();
  std::optional<v1::DaemonMessage> again = coordinator_.Await(2, IsHello);
  ASSERT_TRUE(again.has_value());
  EXPECT_TRUE(again->hello().in_doubt().epoch_id().empty());
  EXPECT_EQ(again->hello().committed_version(), before);
  EXPECT_TRUE(again->hello().committed_epoch_id().empty());
  EXPECT_EQ(registry_.CommittedVersion(), before);
  EXPECT_EQ(refit_.WrongDestinationBytes(), poisoned);
}

TEST_F(CoordinatorLinkTest, APauseIsAnsweredWithItsIdAndStopEndsTheSession) {
  ASSERT_TRUE(coordinator_.Await(1, IsHello).has_value());
  Welcome(5000);
  v1::CoordinatorMessage pause;
  pause.mutable_pause()->set_pause_id("job-pause-1");
  pause.mutable_pause()->set_version(1);
  pause.mutable_pause()->set_deadline_ms(200);
  pause.mutable_pause()->add_ranks(0);  // no engine attached: it cannot pause
  ASSERT_TRUE(coordinator_.Send(pause));
  std::optional<v1::DaemonMessage> paused =
      coordinator_.Await(1, [](const v1::DaemonMessage& m) { return m.has_paused(); });
  ASSERT_TRUE(paused.has_value());
  EXPECT_EQ(paused->paused().pause_id(), "job-pause-1");
  EXPECT_EQ(paused->paused().ranks_size(), 0);
  link_->Stop();
  EXPECT_TRUE(coordinator_.AwaitEnd(1));
  EXPECT_FALSE(link_->connected());
}

}  // namespace
}  // namespace refit::daemon

// Who belongs to a refit group, against a real coordinator over gRPC: daemons speak raw
// control streams here so the test controls exactly what each one sends. A daemon that
// goes silent is cut off within its lease; a new incarnation of a node fences the old one
// (its ranks leave, its stream is cut, and it cannot come back); a reconnect of the same
// incarnation simply takes over.
#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "coordinator/coordinator_server.h"
#include "gtest/gtest.h"
#include "transport/data_plane_address.h"

namespace refit::daemon {
namespace {

using Stream = grpc::ClientReaderWriter<v1::DaemonMessage, v1::CoordinatorMessage>;

constexpr int64_t kLeaseMs = 1000;
constexpr int64_t kForgetMs = 2500;

class MembershipTest : public ::testing::Test {
 protected:
  void SetUp() override {
    v1::JobSpec job;
    job.set_name("members");
    job.set_source_ranks(1);
    job.set_destination_ranks(1);
    job.set_lease_ms(kLeaseMs);
    job.set_forget_daemons_after_ms(kForgetMs);
    auto server = CoordinatorServer::Start("127.0.0.1:0", job, absl::Seconds(30));
    ASSERT_TRUE(server.ok()) << server.status();
    coordinator_ = std::move(*server);
    stub_ = v1::CoordinatorControl::NewStub(
        grpc::CreateChannel(coordinator_->address(), grpc::InsecureChannelCredentials()));
  }

  struct Daemon {
    std::unique_ptr<grpc::ClientContext> context = std::make_unique<grpc::ClientContext>();
    std::unique_ptr<Stream> stream;
    v1::CoordinatorMessage welcome;
  };

  // Opens a control stream, says hello and reads the welcome (if one comes).
  Daemon Connect(const std::string& node, const std::string& incarnation) {
    Daemon daemon;
    daemon.context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    daemon.stream = stub_->Control(daemon.context.get());
    v1::DaemonMessage hello;
    hello.mutable_hello()->set_node(node);
    hello.mutable_hello()->set_incarnation(incarnation);
    hello.mutable_hello()->set_data_plane_address(transport::SealDataPlaneAddress(node));
    EXPECT_TRUE(daemon.stream->Write(hello));
    daemon.stream->Read(&daemon.welcome);
    return daemon;
  }

  static void RegisterDestination(Daemon* daemon, int64_t rank) {
    v1::DaemonMessage message;
    message.mutable_register_rank()->set_role(v1::ROLE_DESTINATION);
    message.mutable_register_rank()->mutable_layout()->set_rank(rank);
    ASSERT_TRUE(daemon->stream->Write(message));
    // The coordinator answers every registration.
    v1::CoordinatorMessage answer;
    ASSERT_TRUE(daemon->stream->Read(&answer));
    ASSERT_TRUE(answer.has_registration()) << answer.DebugString();
    EXPECT_TRUE(answer.registration().accepted()) << answer.DebugString();
    EXPECT_EQ(answer.registration().rank(), rank);
  }

  // Waits (bounded) until `done()` holds.
  static bool Eventually(const std::function<bool()>& done, absl::Duration limit) {
    const absl::Time deadline = absl::Now() + limit;
    while (absl::Now() < deadline) {
      if (done()) return true;
      absl::SleepFor(absl::Milliseconds(10));
    }
    return done();
  }

  bool Listed(const std::string& node) {
    for (const std::string& name : coordinator_->cluster().DaemonNames()) {
      if (name == node || name == node + " (disconnected)") return true;
    }
    return false;
  }

  bool Disconnected(const std::string& node) {
    for (const std::string& name : coordinator_->cluster().DaemonNames()) {
      if (name == node + " (disconnected)") return true;
    }
    return false;
  }

  std::unique_ptr<CoordinatorServer> coordinator_;
  std::unique_ptr<v1::CoordinatorControl::Stub> stub_;
};

TEST_F(MembershipTest, TheWelcomeCarriesTheLease) {
  Daemon daemon = Connect("node-a", "one");
  ASSERT_TRUE(daemon.welcome.has_welcome());
  EXPECT_EQ(daemon.welcome.welcome().lease_ms(), kLeaseMs);
  EXPECT_EQ(daemon.welcome.welcome().daemon_index(), 0);
}

TEST_F(MembershipTest, ASilentDaemonIsCutOffWithinItsLeaseAndAHeartbeatingOneIsNot) {
  Daemon silent = Connect("silent", "one");
  Daemon beating = Connect("beating", "one");
  RegisterDestination(&silent, 0);
  ASSERT_TRUE(
      Eventually([&] { return coordinator_->cluster().RankCount(v1::ROLE_DESTINATION) == 1; },
                 absl::Seconds(5)));
  const absl::Time start = absl::Now();
  v1::DaemonMessage heartbeat;
  heartbeat.mutable_heartbeat();
  bool cut = false;
  while (absl::Now() - start < absl::Milliseconds(3 * kLeaseMs)) {
    ASSERT_TRUE(beating.stream->Write(heartbeat));
    if (!cut && Disconnected("silent")) {
      cut = true;
      // A lease, plus at most a quarter lease until the check, plus scheduling.
      EXPECT_LT(absl::Now() - start, absl::Milliseconds(kLeaseMs * 5 / 4 + 300));
    }
    absl::SleepFor(absl::Milliseconds(kLeaseMs / 4));
  }
  EXPECT_TRUE(cut);
  EXPECT_FALSE(Disconnected("beating"));
  EXPECT_EQ(coordinator_->cluster().RankCount(v1::ROLE_DESTINATION), 0);
  // The silent daemon's stream was ended by the coordinator.
  v1::CoordinatorMessage message;
  EXPECT_FALSE(silent.stream->Read(&message));
  EXPECT_EQ(silent.stream->Finish().error_code(), grpc::StatusCode::CANCELLED);
}

TEST_F(MembershipTest, ANewIncarnationFencesTheOldOne) {
  Daemon old_life = Connect("node-a", "old");
  RegisterDestination(&old_life, 3);
  ASSERT_TRUE(
      Eventually([&] { return coordinator_->cluster().RankCount(v1::ROLE_DESTINATION) == 1; },
                 absl::Seconds(5)));
  Daemon new_life = Connect("node-a", "new");
  ASSERT_TRUE(new_life.welcome.has_welcome());
  EXPECT_EQ(new_life.welcome.welcome().daemon_index(), old_life.welcome.welcome().daemon_index());
  // The old session's ranks left with it and its stream was cut.
  EXPECT_EQ(coordinator_->cluster().RankCount(v1::ROLE_DESTINATION), 0);
  v1::CoordinatorMessage message;
  EXPECT_FALSE(old_life.stream->Read(&message));
  old_life.stream->Finish();
  // The old incarnation cannot take the node back.
  Daemon again = Connect("node-a", "old");
  EXPECT_FALSE(again.welcome.has_welcome());
  const grpc::Status refused = again.stream->Finish();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_TRUE(absl::StrContains(refused.error_message(), "incarnation old was replaced"))
      << refused.error_message();
  // The new incarnation is the member: its registrations count.
  RegisterDestination(&new_life, 3);
  ASSERT_TRUE(
      Eventually([&] { return coordinator_->cluster().RankCount(v1::ROLE_DESTINATION) == 1; },
                 absl::Seconds(5)));
  EXPECT_FALSE(Disconnected("node-a"));
}

TEST_F(MembershipTest, TheSameIncarnationReconnectingTakesOver) {
  Daemon first = Connect("node-b", "same");
  Daemon second = Connect("node-b", "same");
  ASSERT_TRUE(second.welcome.has_welcome());
  v1::CoordinatorMessage message;
  EXPECT_FALSE(first.stream->Read(&message));
  first.stream->Finish();
  // The first stream's end does not take the node out: the second session is current.
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_FALSE(Disconnected("node-b"));
  RegisterDestination(&second, 0);
  EXPECT_TRUE(
      Eventually([&] { return coordinator_->cluster().RankCount(v1::ROLE_DESTINATION) == 1; },
                 absl::Seconds(5)));
}

TEST_F(MembershipTest, ADaemonGoneForGoodIsForgottenAndComesBackAsANewMember) {
  Daemon stays = Connect("stays", "one");
  Daemon gone = Connect("gone", "one");
  ASSERT_TRUE(gone.welcome.has_welcome());
  gone.stream->WritesDone();
  gone.stream->Finish();
  v1::DaemonMessage heartbeat;
  heartbeat.mutable_heartbeat();
  // `stays` heartbeats all along; `gone` is listed as disconnected for a while, then no more.
  auto beating = [&](const std::function<bool()>& done) {
    return [&, done] { return stays.stream->Write(heartbeat) && done(); };
  };
  ASSERT_TRUE(Eventually(beating([&] { return Disconnected("gone"); }), absl::Seconds(5)));
  const absl::Time left = absl::Now();
  ASSERT_TRUE(Eventually(beating([&] { return !Listed("gone"); }), absl::Seconds(10)));
  EXPECT_GE(absl::Now() - left, absl::Milliseconds(kForgetMs - 100));
  EXPECT_FALSE(Disconnected("stays"));
  // It comes back as a new member, with an index no other daemon has had.
  Daemon back = Connect("gone", "two");
  ASSERT_TRUE(back.welcome.has_welcome());
  EXPECT_NE(back.welcome.welcome().daemon_index(), gone.welcome.welcome().daemon_index());
  EXPECT_NE(back.welcome.welcome().daemon_index(), stays.welcome.welcome().daemon_index());
  EXPECT_TRUE(Listed("gone"));
}

}  // namespace
}  // namespace refit::daemon

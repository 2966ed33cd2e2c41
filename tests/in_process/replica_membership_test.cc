// Destination replicas as members, against a real coordinator over gRPC and three refitd
// halves (registry + coordinator link, a UCX worker each) with ranks in real shared memory:
// a trainer node and one node per inference replica (TP2 each). A refit goes to the
// replicas complete when it starts; a replica that completes later catches up by itself
// (every byte checked) while the sources hold the version, and waits for the next refit
// once they moved on; fewer complete replicas than the job's minimum are refused, naming
// what is missing. (A replica lost during an epoch: tests/e2e/replicas.sh, with kill -9.)
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/notification.h"
#include "coordinator/coordinator_server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/testing/layout_builder.h"
#include "refitd/coordinator_link.h"
#include "refitd/testing/bucketed_ranks.h"
#include "refitd/testing/registration.h"
#include "tests/in_process/testing/coordinator_with_daemons.h"
#include "transport/testing/backed_layouts.h"

namespace refit::daemon {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class ReplicaMembershipTest : public ::testing::Test {
 protected:
  // Trainers hold rows of w, inference replica r holds its columns on ranks 2r and 2r + 1;
  // everybody holds the norm.
  void Start(int32_t min_replicas, int64_t pause_deadline_ms = 0, int replicas = 2) {
    v1::JobSpec job;
    job.set_pause_deadline_ms(pause_deadline_ms);
    job.set_data_plane_stall_ms(stall_ms_);
    job.set_name("members");
    job.set_source_ranks(2);
    job.set_destination_ranks(2 * replicas);
    job.mutable_destination_replicas()->set_ranks_per_replica(2);
    job.mutable_destination_replicas()->set_min_replicas(min_replicas);
    job_ = job;
    ASSERT_TRUE(cluster_.Start(job, &metrics_).ok());
    refit::testing::LayoutBuilder sources, destinations;
    sources.Tensor("w", {8, 12}).Tensor("norm", {12});
    sources.Chunked("w", 0, {0, 1}).Replicated("norm", {0, 1});
    destinations.Tensor("w", {8, 12}).Tensor("norm", {12});
    for (int64_t replica = 0; replica < replicas; ++replica) {
      destinations.Chunked("w", 1, {2 * replica, 2 * replica + 1});
      destinations.Replicated("norm", {2 * replica, 2 * replica + 1});
    }
    layout_ = destinations.spec();
    sources_ = backed_.Back(sources.spec(), "source");
    destinations_ = backed_.Back(layout_, "destination");
    cluster_.Link(&trainer_, "trainer");
    for (int replica = 0; replica < replicas; ++replica) {
      replicas_.push_back(std::make_unique<RankRegistry>("inference-" + std::to_string(replica)));
      cluster_.Link(replicas_.back().get(), "inference-" + std::to_string(replica));
    }
    for (const v1::RankLayout& r : sources_.ranks()) {
      ASSERT_TRUE(trainer_.Register(testing::RegistrationOf(v1::ROLE_SOURCE, r, sources_)).ok());
      transport::testing::FillViews(&trainer_.HoldBuffers().mutable_buffers(), v1::ROLE_SOURCE, r);
    }
  }

  void TearDown() override { cluster_.Stop(); }

  // Gives destination rank `rank` new, poisoned memory (for its next registration).
  void NewMemory(int64_t rank) {
    const v1::LayoutSpec fresh = backed_.Back(layout_, "destination");
    *destinations_.mutable_ranks(rank) = fresh.ranks(rank);
  }

  // Registers destination rank `rank` on its replica's node; its registration session.
  std::string RegisterDestination(int64_t rank, bool pauses_for_writes = false) {
    v1::RankLayout layout = destinations_.ranks(rank);
    layout.set_pauses_for_writes(pauses_for_writes);
    absl::StatusOr<std::string> session = replicas_[rank / 2]->Register(
        testing::RegistrationOf(v1::ROLE_DESTINATION, layout, destinations_));
    EXPECT_TRUE(session.ok()) << session.status();
    return session.ok() ? *session : "";
  }
  // Registers destination rank `rank` with its request changed by `change` first (a
  // misdeclared rank).
  void RegisterDeclaring(int64_t rank,
                         const std::function<void(v1::RegisterRankRequest*)>& change) {
    v1::RegisterRankRequest request =
        testing::RegistrationOf(v1::ROLE_DESTINATION, destinations_.ranks(rank), destinations_);
    change(&request);
    const absl::StatusOr<std::string> session = replicas_[rank / 2]->Register(request);
    EXPECT_TRUE(session.ok()) << session.status();
  }
  // Each replica's reason to be held, as the coordinator's Status says it.
  std::map<int64_t, std::string> HeldReasons() {
    const v1::StatusResponse status = cluster_.Status();
    std::map<int64_t, std::string> reasons;
    for (const v1::ReplicaStatus& replica : status.replicas()) {
      if (replica.state() == "held") reasons[replica.replica()] = replica.reason();
    }
    return reasons;
  }
  void Publish(int64_t version) {
    for (const v1::RankLayout& r : sources_.ranks()) {
      ASSERT_TRUE(trainer_.Publish(r.rank(), version).ok());
    }
  }
  // Waits (bounded) until the coordinator knows `destinations` destination ranks and both
  // source ranks.
  bool GroupSeen(int64_t destinations) { return cluster_.GroupSeen(2, destinations); }
  // Waits (bounded) until the coordinator holds exactly the destination ranks of `replicas`.
  bool ReplicasSeen(const std::set<int64_t>& replicas) {
    std::set<int64_t> expected;
    for (int64_t replica : replicas) expected.insert({2 * replica, 2 * replica + 1});
    return testing::CoordinatorWithDaemons::Eventually([&]() {
      std::set<int64_t> seen;
      for (const auto& [rank, holder] : cluster_.server().cluster().DestinationRanks()) {
        seen.insert(rank);
      }
      return seen == expected;
    });
  }

  grpc::Status Refit(int64_t version, v1::RefitReport* report) {
    return cluster_.Refit(version, report);
  }
  // Waits (bounded) until the counter or gauge `metric` holds `value`.
  template <typename Metric>
  static bool Reaches(Metric& metric, double value) {
    return testing::CoordinatorWithDaemons::Eventually([&]() { return metric.Value() == value; });
  }
  // Each replica's state as the coordinator's Status says it ("0 current", "1 absent").
  std::vector<std::string> ReplicaStates() {
    const v1::StatusResponse status = cluster_.Status();
    std::vector<std::string> states;
    for (const v1::ReplicaStatus& replica : status.replicas()) {
      states.push_back(absl::StrCat(replica.replica(), " ", replica.state()));
    }
    return states;
  }
  // Waits for `version` on destination rank `rank`, then counts its wrong bytes (-1: the
  // version did not arrive).
  int64_t WrongBytesAfter(int64_t rank, int64_t version) {
    RankRegistry& node = *replicas_[rank / 2];
    if (!node.WaitForVersion(rank, version, absl::Now() + absl::Seconds(10)).ok()) return -1;
    return transport::testing::WrongBytes(node.HoldBuffers().buffers(), v1::ROLE_DESTINATION,
                                          destinations_.ranks(rank));
  }

  // The engine of a destination rank that pauses for writes: holds its WatchWrites stream
  // (EnginePauses::Serve, as LocalDaemon.WatchWrites does) on a thread, notes every notice,
  // and answers BEFORE_WRITE with Paused unless told to ignore the next `ignore` of them. At
  // each BEFORE_WRITE it also notes whether its buffers were still unwritten (poisoned)
  // then, and again 100 ms later: refit must wait for the pause before writing.
  class Engine {
   public:
    // `before_pausing` (may be empty) runs at each BEFORE_WRITE before the engine answers.
    Engine(ReplicaMembershipTest* test, int64_t rank, const std::string& session, int ignore,
           std::function<void()> before_pausing = nullptr)
        : test_(test),
          rank_(rank),
          session_(session),
          ignore_(ignore),
          before_pausing_(std::move(before_pausing)) {
      thread_ = std::thread([this] {
        test_->replicas_[rank_ / 2]->engine_pauses().Serve(
            rank_, session_, [this](const v1::WriteNotice& notice) { return Take(notice); },
            [this] { return stop_.load(); });
      });
    }
    ~Engine() {
      stop_ = true;
      thread_.join();
    }
    // "BEFORE_WRITE 1 unwritten", "COMMITTED 1", "SKIPPED 1"... as they came.
    std::vector<std::string> notices() {
      absl::MutexLock lock(&mu_);
      return notices_;
    }
    // Waits (bounded) until `count` notices came.
    bool AwaitNotices(size_t count) {
      absl::MutexLock lock(&mu_);
      auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return notices_.size() >= count; };
      return mu_.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(20));
    }

   private:
    bool Take(const v1::WriteNotice& notice) {
      std::string seen =
          absl::StrCat(v1::WriteNotice::Kind_Name(notice.kind()), " ", notice.version());
      if (notice.kind() == v1::WriteNotice::BEFORE_WRITE) {
        const bool unwritten = Unwritten();
        absl::SleepFor(absl::Milliseconds(100));
        absl::StrAppend(&seen, unwritten && Unwritten() ? " unwritten" : " written");
      }
      if (notice.kind() != v1::WriteNotice::ATTACHED) {
        absl::MutexLock lock(&mu_);
        notices_.push_back(seen);
      }
      if (notice.kind() == v1::WriteNotice::BEFORE_WRITE) {
        if (before_pausing_) before_pausing_();
        if (ignore_ > 0) {
          --ignore_;
        } else {
          EXPECT_TRUE(test_->replicas_[rank_ / 2]
                          ->engine_pauses()
                          .Paused(rank_, session_, notice.pause_id())
                          .ok());
        }
      }
      return true;
    }
    bool Unwritten() {
      return transport::testing::WrongBytes(test_->replicas_[rank_ / 2]->HoldBuffers().buffers(),
                                            v1::ROLE_DESTINATION,
                                            test_->destinations_.ranks(rank_)) > 0;
    }

    ReplicaMembershipTest* test_;
    const int64_t rank_;
    const std::string session_;
    int ignore_;
    const std::function<void()> before_pausing_;
    std::atomic<bool> stop_{false};
    absl::Mutex mu_;
    std::vector<std::string> notices_ ABSL_GUARDED_BY(mu_);
    std::thread thread_;
  };

  // The coordinator goes away and comes back on the same address knowing nothing.
  void RestartCoordinator() { ASSERT_TRUE(cluster_.RestartCoordinator(job_).ok()); }

  CoordinatorMetrics metrics_{std::make_shared<prometheus::Registry>()};
  int64_t stall_ms_ = 0;  // the job's dataPlaneStallMs (0: the default), set before Start
  v1::JobSpec job_;
  transport::testing::BackedLayouts backed_;
  v1::LayoutSpec sources_, destinations_;
  RankRegistry trainer_{"trainer"};
  v1::LayoutSpec layout_;  // the destinations' layout, before any memory
  std::vector<std::unique_ptr<RankRegistry>> replicas_;  // one node per replica
  // Declared after the registries: its links go first.
  testing::CoordinatorWithDaemons cluster_;
};

TEST_F(ReplicaMembershipTest, AReplicaThatCompletesLaterCatchesUpByItself) {
  Start(/*min_replicas=*/1);
  RegisterDestination(0);
  RegisterDestination(1);
  ASSERT_TRUE(GroupSeen(2));
  Publish(1);
  v1::RefitReport first;
  ASSERT_TRUE(Refit(1, &first).ok());
  EXPECT_THAT(first.replicas(), ElementsAre(0));
  EXPECT_FALSE(first.catch_up());
  EXPECT_EQ(WrongBytesAfter(0, 1), 0);
  EXPECT_THAT(ReplicaStates(), ElementsAre("0 current", "1 absent"));
  EXPECT_EQ(metrics_.replicas.Add({{"state", "absent"}}).Value(), 1);

  // Replica 1 comes while the trainers still hold version 1: it catches up, nobody asked.
  RegisterDestination(2);
  RegisterDestination(3);
  EXPECT_EQ(WrongBytesAfter(2, 1), 0);
  EXPECT_EQ(WrongBytesAfter(3, 1), 0);
  EXPECT_THAT(ReplicaStates(), ElementsAre("0 current", "1 current"));
  // The catch-up's counter and the gauges follow once its refit returns (the daemons heard
  // of the commit before).
  EXPECT_TRUE(Reaches(metrics_.catch_ups.Add({{"result", "committed"}}), 1));
  EXPECT_TRUE(Reaches(metrics_.replica_current.Add({{"replica", "1"}}), 1));
  // A repeat finds every replica holding it: the committed report, now naming both.
  v1::RefitReport again;
  ASSERT_TRUE(Refit(1, &again).ok());
  EXPECT_EQ(again.epoch_id(), first.epoch_id());
  EXPECT_THAT(again.replicas(), ElementsAre(0, 1));
  EXPECT_EQ(metrics_.committed.Value(), 2);  // version 1, then the catch-up

  // Replica 1 loses a rank: the next version goes to replica 0 alone.
  ASSERT_TRUE(replicas_[1]->Deregister(v1::ROLE_DESTINATION, 3).ok());
  ASSERT_TRUE(GroupSeen(3));
  Publish(2);
  v1::RefitReport second;
  ASSERT_TRUE(Refit(2, &second).ok());
  EXPECT_THAT(second.replicas(), ElementsAre(0));
  EXPECT_THAT(ReplicaStates(), ElementsAre("0 current", "1 incomplete"));
}

// A replica that completes while a refit holds the group (here while replica 0's engines
// are asked to pause, after the refit chose its replicas) is not in that refit; it catches
// up once the refit is over.
TEST_F(ReplicaMembershipTest, AReplicaThatCompletesDuringARefitCatchesUpWhenItEnds) {
  Start(/*min_replicas=*/1);
  std::vector<std::unique_ptr<Engine>> engines;
  for (int64_t rank : {0, 1}) {
    const std::string session = RegisterDestination(rank, /*pauses_for_writes=*/true);
    std::function<void()> complete_replica_one;
    if (rank == 0) {
      complete_replica_one = [this, registered = false]() mutable {
        if (std::exchange(registered, true)) return;
        RegisterDestination(2);
        RegisterDestination(3);
        EXPECT_TRUE(GroupSeen(4));
        // Not a wait for an outcome: time for the preparer, woken by the registrations, to
        // find the group held (the interleaving that used to leave the replica behind).
        absl::SleepFor(absl::Milliseconds(300));
      };
    }
    engines.push_back(std::make_unique<Engine>(this, rank, session, 0, complete_replica_one));
  }
  ASSERT_TRUE(GroupSeen(2));
  Publish(1);
  v1::RefitReport first;
  const grpc::Status refit = Refit(1, &first);
  ASSERT_TRUE(refit.ok()) << refit.error_message();
  EXPECT_THAT(first.replicas(), ElementsAre(0));
  for (int64_t rank : {2, 3}) EXPECT_EQ(WrongBytesAfter(rank, 1), 0) << rank;
  EXPECT_TRUE(Reaches(metrics_.catch_ups.Add({{"result", "committed"}}), 1));
}

// A restarted coordinator learns from the daemons which ranks hold the version it recovers:
// the replica that took it is current (not behind), and one completing later catches up.
TEST_F(ReplicaMembershipTest, AfterACoordinatorRestartReplicasAreCurrentAndCatchUp) {
  Start(/*min_replicas=*/1);
  RegisterDestination(0);
  RegisterDestination(1);
  ASSERT_TRUE(GroupSeen(2));
  Publish(1);
  v1::RefitReport first;
  ASSERT_TRUE(Refit(1, &first).ok());
  RestartCoordinator();
  ASSERT_TRUE(GroupSeen(2));  // the daemons reconnect and replay their ranks
  EXPECT_THAT(ReplicaStates(), ElementsAre("0 current", "1 absent"));
  RegisterDestination(2);
  RegisterDestination(3);
  for (int64_t rank : {2, 3}) EXPECT_EQ(WrongBytesAfter(rank, 1), 0) << rank;
  EXPECT_EQ(transport::testing::WrongBytes(replicas_[0]->HoldBuffers().buffers(),
                                           v1::ROLE_DESTINATION, destinations_.ranks(0)),
            0);
  for (int i = 0; i < 250 && ReplicaStates() != std::vector<std::string>{"0 current", "1 current"};
       ++i) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_THAT(ReplicaStates(), ElementsAre("0 current", "1 current"));
}

TEST_F(ReplicaMembershipTest, AReplicaCompletedAfterTheSourcesMovedOnWaitsForTheNextRefit) {
  Start(/*min_replicas=*/1);
  RegisterDestination(0);
  RegisterDestination(1);
  ASSERT_TRUE(GroupSeen(2));
  Publish(1);
  v1::RefitReport report;
  ASSERT_TRUE(Refit(1, &report).ok());
  Publish(2);  // the trainers' buffers hold version 2 now
  // The coordinator hears of it before replica 1 completes (another stream).
  for (int i = 0; i < 250 && cluster_.server().cluster().PublishedRange().first != 2; ++i) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_EQ(cluster_.server().cluster().PublishedRange(), (std::pair<int64_t, int64_t>{2, 2}));
  RegisterDestination(2);
  RegisterDestination(3);
  ASSERT_TRUE(GroupSeen(4));
  // No catch-up of a version nobody holds any more; a repeat of it is refused saying why.
  const grpc::Status repeat = Refit(1, &report);
  EXPECT_EQ(repeat.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(repeat.error_message(),
              HasSubstr("version 1 is committed, but replica 1 lacks it, and the source ranks "
                        "no longer all hold it"));
  EXPECT_THAT(ReplicaStates(), ElementsAre("0 current", "1 behind"));
  EXPECT_EQ(metrics_.catch_ups.Add({{"result", "committed"}}).Value(), 0);
  ASSERT_TRUE(Refit(2, &report).ok());
  EXPECT_THAT(report.replicas(), ElementsAre(0, 1));
  for (int64_t rank = 0; rank < 4; ++rank) EXPECT_EQ(WrongBytesAfter(rank, 2), 0) << rank;
}

TEST_F(ReplicaMembershipTest, FewerCompleteReplicasThanTheMinimumAreRefusedNamingTheGap) {
  Start(/*min_replicas=*/2);
  RegisterDestination(0);
  RegisterDestination(1);
  RegisterDestination(2);
  ASSERT_TRUE(GroupSeen(3));
  Publish(1);
  v1::RefitReport report;
  const grpc::Status refused = Refit(1, &report);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(refused.error_message(),
              HasSubstr("1 complete destination replica of the 2 it needs (2 ranks each); "
                        "complete: 0; replica 1 (destination ranks 2-3) misses ranks 3"));
  EXPECT_EQ(metrics_.refused.Add({{"reason", "incomplete_group"}}).Value(), 1);
  EXPECT_EQ(metrics_.epochs.Add({{"result", "aborted"}}).Value(), 0);
  RegisterDestination(3);
  ASSERT_TRUE(GroupSeen(4));
  ASSERT_TRUE(Refit(1, &report).ok());
  EXPECT_THAT(report.replicas(), ElementsAre(0, 1));
}

// Misdeclared replicas are held out, each with its reason (in Status, and in its ranks'
// WaitForVersion, at once), while the others refit; one fixed catches up by itself.
TEST_F(ReplicaMembershipTest, MisdeclaredReplicasAreHeldWithTheirReasonAndTheOthersRefit) {
  Start(/*min_replicas=*/1, /*pause_deadline_ms=*/0, /*replicas=*/3);
  RegisterDestination(0);
  RegisterDestination(1);
  // Replica 1 misspells the norm (declaration and views alike).
  auto misspell = [](v1::RegisterRankRequest* request) {
    for (v1::TensorSpec& t : *request->mutable_tensors()) {
      if (t.name() == "norm") t.set_name("nrom");
    }
    for (v1::ShardView& view : *request->mutable_layout()->mutable_views()) {
      if (view.tensor() == "norm") view.set_tensor("nrom");
    }
  };
  RegisterDeclaring(2, misspell);
  RegisterDeclaring(3, misspell);
  // Replica 2 declares the norm in another dtype than the sources hold. (Ranks of one
  // replica that disagree are refused at registration by their refitd when they share a
  // node, held by the coordinator otherwise: replica_vetting_test.)
  auto retype = [](v1::RegisterRankRequest* request) {
    for (v1::TensorSpec& t : *request->mutable_tensors()) {
      if (t.name() == "norm") t.set_dtype("F16");
    }
  };
  RegisterDeclaring(4, retype);
  RegisterDeclaring(5, retype);
  ASSERT_TRUE(GroupSeen(6));
  Publish(1);
  v1::RefitReport report;
  const grpc::Status refit = Refit(1, &report);
  ASSERT_TRUE(refit.ok()) << refit.error_message();
  EXPECT_THAT(report.replicas(), ElementsAre(0));
  for (int64_t rank : {0, 1}) EXPECT_EQ(WrongBytesAfter(rank, 1), 0) << rank;
  EXPECT_THAT(ReplicaStates(), ElementsAre("0 current", "1 held", "2 held"));
  const std::map<int64_t, std::string> reasons = HeldReasons();
  EXPECT_THAT(reasons.at(1), HasSubstr("replica 1 (destination ranks 2-3) cannot be written from "
                                       "the sources: nrom: the destinations declare this tensor "
                                       "but the sources do not"));
  EXPECT_THAT(reasons.at(2),
              HasSubstr("replica 2 (destination ranks 4-5) cannot be written from the sources: "
                        "norm: destination dtype F16 shape [12] disagrees with source dtype F32 "
                        "shape [12]"));
  EXPECT_EQ(metrics_.replicas.Add({{"state", "held"}}).Value(), 2);
  // A held rank's wait hears why at once, not at its deadline.
  const absl::Time start = absl::Now();
  const absl::StatusOr<int64_t> waited =
      replicas_[1]->WaitForVersion(2, 1, absl::Now() + absl::Seconds(20));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(waited.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(waited.status().message(),
              HasSubstr("destination rank 2: the coordinator holds its replica out of refits: "
                        "replica 1 (destination ranks 2-3) cannot be written from the sources: "
                        "nrom"));

  // Replica 1 registers again, declared right: it catches up while the sources hold 1.
  for (int64_t rank : {2, 3})
    ASSERT_TRUE(replicas_[1]->Deregister(v1::ROLE_DESTINATION, rank).ok());
  for (int64_t rank : {2, 3}) RegisterDestination(rank);
  for (int64_t rank : {2, 3}) EXPECT_EQ(WrongBytesAfter(rank, 1), 0) << rank;
  for (int i = 0;
       i < 250 && ReplicaStates() != std::vector<std::string>{"0 current", "1 current", "2 held"};
       ++i) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_THAT(ReplicaStates(), ElementsAre("0 current", "1 current", "2 held"));
}

// Replica 1 takes its weights in buckets and its processes stop taking them: it is
// dropped (within half the stall limit) and replica 0 takes the version.
TEST_F(ReplicaMembershipTest, ABucketedReplicaThatStopsDrainingIsDroppedAndTheOthersRefit) {
  stall_ms_ = 2000;
  Start(/*min_replicas=*/1);
  for (int64_t rank = 0; rank < 4; ++rank) RegisterDestination(rank);
  v1::LayoutSpec replica_one = destinations_;
  replica_one.mutable_ranks()->DeleteSubrange(0, 2);
  absl::Notification release;  // outlives the ranks: their threads wait on it
  testing::BucketedRanks stalled(replicas_[1].get(), replica_one, 256);
  stalled.Attach([&](int64_t, const v1::Bucket& bucket, const uint8_t*) {
    if (bucket.version() == 1) release.WaitForNotificationWithTimeout(absl::Seconds(30));
    return std::string();
  });
  ASSERT_TRUE(GroupSeen(4));
  Publish(1);
  const absl::Time start = absl::Now();
  v1::RefitReport report;
  const grpc::Status refit = Refit(1, &report);
  const absl::Duration took = absl::Now() - start;
  release.Notify();
  ASSERT_TRUE(refit.ok()) << refit.error_message();
  EXPECT_THAT(report.replicas(), ElementsAre(0));
  EXPECT_THAT(report.dropped_replicas(), ElementsAre(1));
  EXPECT_LT(took, absl::Seconds(8));
  for (int64_t rank : {0, 1}) EXPECT_EQ(WrongBytesAfter(rank, 1), 0) << rank;
}

// A replica is lost when its daemon is gone, not when its session was renewed: replica 1's
// refitd reconnects (a new session and UCX worker) while a refit waits for the trainers;
// its ranks come back with the registrations they had, so the epoch, planned again, still
// writes both replicas.
TEST_F(ReplicaMembershipTest, AReplicaWhoseDaemonReconnectsIsNotDropped) {
  Start(/*min_replicas=*/1);
  for (int64_t rank = 0; rank < 4; ++rank) RegisterDestination(rank);
  ASSERT_TRUE(GroupSeen(4));
  const std::string before = cluster_.server().cluster().IncarnationOf("inference-1");
  v1::RefitReport report;
  grpc::Status committed;
  std::thread refit([&] { committed = Refit(1, &report); });
  // Not a wait for an outcome: time for the refit to take its snapshot and wait.
  absl::SleepFor(absl::Milliseconds(300));
  cluster_.Link(replicas_[1].get(), "inference-1");
  ASSERT_TRUE(testing::CoordinatorWithDaemons::Eventually(
      [&]() { return cluster_.server().cluster().IncarnationOf("inference-1") != before; }));
  ASSERT_TRUE(GroupSeen(4));
  Publish(1);
  refit.join();
  ASSERT_TRUE(committed.ok()) << committed.error_message();
  EXPECT_THAT(report.replicas(), ElementsAre(0, 1));
  EXPECT_THAT(report.dropped_replicas(), ElementsAre());
  for (int64_t rank = 0; rank < 4; ++rank) EXPECT_EQ(WrongBytesAfter(rank, 1), 0) << rank;
}

TEST_F(ReplicaMembershipTest, EnginesPauseBeforeTheWritesAndOneTooSlowIsSkippedThenCatchesUp) {
  Start(/*min_replicas=*/1, /*pause_deadline_ms=*/1000);
  std::vector<std::unique_ptr<Engine>> engines;
  for (int64_t rank = 0; rank < 4; ++rank) {
    const std::string session = RegisterDestination(rank, /*pauses_for_writes=*/true);
    // Replica 1's engines let the first pause pass unanswered.
    engines.push_back(std::make_unique<Engine>(this, rank, session, rank >= 2 ? 1 : 0));
  }
  ASSERT_TRUE(GroupSeen(4));
  Publish(1);
  v1::RefitReport report;
  ASSERT_TRUE(Refit(1, &report).ok());
  EXPECT_THAT(report.replicas(), ElementsAre(0));
  EXPECT_THAT(report.skipped_replicas(), ElementsAre(1));
  // Replica 0's engines were told before anything was written, the epoch waited for their
  // pause, and they heard of the commit; replica 1's were let go.
  for (int64_t rank : {0, 1}) {
    ASSERT_TRUE(engines[rank]->AwaitNotices(2));
    EXPECT_THAT(engines[rank]->notices(), ElementsAre("BEFORE_WRITE 1 unwritten", "COMMITTED 1"))
        << rank;
    EXPECT_EQ(WrongBytesAfter(rank, 1), 0);
  }
  // Replica 1 catches up by itself once the refit is over (its engines answer this time).
  for (int64_t rank : {2, 3}) {
    EXPECT_EQ(WrongBytesAfter(rank, 1), 0) << rank;
    ASSERT_TRUE(engines[rank]->AwaitNotices(4));
    EXPECT_THAT(engines[rank]->notices(), ElementsAre("BEFORE_WRITE 1 unwritten", "SKIPPED -1",
                                                      "BEFORE_WRITE 1 unwritten", "COMMITTED 1"))
        << rank;
  }
  EXPECT_TRUE(Reaches(metrics_.catch_ups.Add({{"result", "committed"}}), 1));
}

// A replica whose refitd goes away while the epoch waits for its engines to pause is
// dropped at once, not waited for until the pause deadline, and not reported as skipped.
TEST_F(ReplicaMembershipTest, AReplicaWhoseDaemonGoesWhileItsEnginesArePausingIsDroppedAtOnce) {
  Start(/*min_replicas=*/1, /*pause_deadline_ms=*/20000);
  std::vector<std::unique_ptr<Engine>> engines;
  for (int64_t rank = 0; rank < 4; ++rank) {
    const std::string session = RegisterDestination(rank, /*pauses_for_writes=*/true);
    // Replica 1's engines never answer the pause: their refitd dies meanwhile.
    engines.push_back(std::make_unique<Engine>(this, rank, session, rank >= 2 ? 1 : 0));
  }
  ASSERT_TRUE(GroupSeen(4));
  Publish(1);
  std::thread killer([&] {
    if (engines[2]->AwaitNotices(1))
      cluster_.Unlink("inference-1");  // inference-1's control stream ends
  });
  const absl::Time start = absl::Now();
  v1::RefitReport report;
  const grpc::Status refit = Refit(1, &report);
  const absl::Duration took = absl::Now() - start;
  killer.join();
  ASSERT_TRUE(refit.ok()) << refit.error_message();
  EXPECT_THAT(report.replicas(), ElementsAre(0));
  EXPECT_THAT(report.dropped_replicas(), ElementsAre(1));
  EXPECT_THAT(report.skipped_replicas(), ElementsAre());
  EXPECT_LT(took, absl::Seconds(10)) << "the refit waited for the pause deadline (20 s)";
  for (int64_t rank : {0, 1}) EXPECT_EQ(WrongBytesAfter(rank, 1), 0) << rank;
  EXPECT_TRUE(Reaches(metrics_.replicas_dropped, 1));
}

TEST_F(ReplicaMembershipTest, WithoutReplicasEnginesThatDoNotPauseFailTheRefitAndResume) {
  Start(/*min_replicas=*/2, /*pause_deadline_ms=*/500);
  std::vector<std::unique_ptr<Engine>> engines;
  for (int64_t rank = 0; rank < 4; ++rank) {
    const std::string session = RegisterDestination(rank, /*pauses_for_writes=*/true);
    engines.push_back(std::make_unique<Engine>(this, rank, session, rank == 3 ? 1 : 0));
  }
  ASSERT_TRUE(GroupSeen(4));
  Publish(1);
  v1::RefitReport report;
  const grpc::Status refused = Refit(1, &report);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_THAT(refused.error_message(),
              HasSubstr("the engines of destination ranks 3 did not pause for version 1 within "
                        "500 ms; 1 replicas left of the 2 needed"));
  EXPECT_EQ(metrics_.refused.Add({{"reason", "engines_not_paused"}}).Value(), 1);
  // Every engine asked to pause hears that it may resume; nothing was written.
  for (int64_t rank = 0; rank < 4; ++rank) {
    ASSERT_TRUE(engines[rank]->AwaitNotices(2));
    EXPECT_THAT(engines[rank]->notices(), ElementsAre("BEFORE_WRITE 1 unwritten", "SKIPPED -1"))
        << rank;
  }
  // The next refit goes through: rank 3's engine answers now.
  ASSERT_TRUE(Refit(1, &report).ok());
  for (int64_t rank = 0; rank < 4; ++rank) EXPECT_EQ(WrongBytesAfter(rank, 1), 0) << rank;
}

// Replicas join and leave at random between 200 versions (each time with new memory): every
// version goes to the replicas present, each of them byte-exact; no file descriptor is left
// behind, and the coordinator ends holding exactly the ranks still registered.
TEST_F(ReplicaMembershipTest, ChurnOverTwoHundredVersions) {
  constexpr int kReplicas = 4;
  Start(/*min_replicas=*/1, /*pause_deadline_ms=*/0, kReplicas);
  auto open_files = [] {
    int count = 0;
    for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
      (void)entry;
      ++count;
    }
    return count;
  };
  std::mt19937 rng(20261206);
  std::set<int64_t> present;
  auto join = [&](int64_t replica) {
    for (int64_t rank : {2 * replica, 2 * replica + 1}) {
      NewMemory(rank);
      RegisterDestination(rank);
    }
    present.insert(replica);
  };
  auto leave = [&](int64_t replica) {
    for (int64_t rank : {2 * replica, 2 * replica + 1}) {
      ASSERT_TRUE(replicas_[replica]->Deregister(v1::ROLE_DESTINATION, rank).ok());
    }
    present.erase(replica);
  };
  join(0);
  int files_after_warmup = 0;
  int joins = 0, leaves = 0;
  for (int64_t version = 1; version <= 200; ++version) {
    if (version == 20) files_after_warmup = open_files();
    for (int64_t replica = 0; replica < kReplicas; ++replica) {
      if (std::uniform_int_distribution<int>(0, 9)(rng) >= 2) continue;  // 1 in 5 changes
      if (!present.count(replica)) {
        join(replica);
        ++joins;
      } else if (present.size() > 1) {
        leave(replica);
        ++leaves;
      }
    }
    ASSERT_TRUE(ReplicasSeen(present)) << version;
    Publish(version);
    v1::RefitReport report;
    const grpc::Status status = Refit(version, &report);
    ASSERT_TRUE(status.ok()) << "version " << version << ": " << status.error_message();
    EXPECT_EQ(std::set<int64_t>(report.replicas().begin(), report.replicas().end()), present)
        << version;
    for (int64_t replica : present) {
      for (int64_t rank : {2 * replica, 2 * replica + 1}) {
        ASSERT_EQ(WrongBytesAfter(rank, version), 0) << "version " << version << " rank " << rank;
      }
    }
  }
  EXPECT_GT(joins, 20);
  EXPECT_GT(leaves, 20);
  // Memory the test itself keeps (a segment per registration, mapped) holds no descriptor;
  // refit's daemons, links and coordinator hold as many as after the first versions.
  EXPECT_LE(open_files(), files_after_warmup + 8);
  EXPECT_EQ(cluster_.server().cluster().RankCount(v1::ROLE_DESTINATION),
            2 * static_cast<int64_t>(present.size()));
}

}  // namespace
}  // namespace refit::daemon

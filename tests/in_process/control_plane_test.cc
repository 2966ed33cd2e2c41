// The control plane end to end in one process: a coordinator serving gRPC on loopback,
// two refitd halves (registry + coordinator link, a UCX worker each) standing for a
// trainer node and an inference node, ranks registered with real shared memory. A Refit
// moves every byte, commits the version, and wakes WaitForVersion; a repeat returns the
// same report; an incomplete group is refused, naming what is missing.
#include <grpcpp/grpcpp.h>

#include <functional>
#include <map>
#include <random>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "client/daemon_clients.h"
#include "coordinator/coordinator_server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/testing/layout_builder.h"
#include "refitd/coordinator_link.h"
#include "refitd/testing/bucketed_ranks.h"
#include "refitd/testing/epoch_faults.h"
#include "refitd/testing/registration.h"
#include "tests/in_process/testing/coordinator_with_daemons.h"
#include "transport/synthetic_weights.h"
#include "transport/testing/backed_layouts.h"

namespace refit::daemon {
namespace {

class ControlPlaneTest : public ::testing::Test {
 protected:
  void SetUp() override {
    v1::JobSpec job;
    job.set_name("test");
    job.set_source_ranks(2);
    job.set_destination_ranks(2);
    job.set_staging_budget_bytes(256);  // several batches
    job.set_data_plane_stall_ms(stall_ms_);
    coordinator_job_ = job;
    ASSERT_TRUE(cluster_.Start(job, &metrics_).ok());

    // Trainers hold rows of w and a norm; inference ranks hold columns of w and the norm.
    const refit::testing::LayoutPair pair = refit::testing::RowsToColumnsPair();
    sources_ = backed_.Back(pair.sources, "source");
    destinations_ = backed_.Back(pair.destinations, "destination");
    cluster_.Link(&trainer_, "trainer");
    cluster_.Link(&inference_, "inference", &inference_metrics_);
    for (const v1::RankLayout& r : sources_.ranks())
      Register(&trainer_, v1::ROLE_SOURCE, r, sources_);
    for (const v1::RankLayout& r : destinations_.ranks()) {
      Register(&inference_, v1::ROLE_DESTINATION, r, destinations_);
    }
  }

  void TearDown() override { cluster_.Stop(); }

  void Register(RankRegistry* registry, v1::Role role, const v1::RankLayout& rank,
                const v1::LayoutSpec& spec) {
    ASSERT_TRUE(registry->Register(testing::RegistrationOf(role, rank, spec)).ok());
  }

  // The registration the coordinator holds for destination rank `rank` (0: none).
  uint64_t DestinationRegistration(int64_t rank) {
    absl::StatusOr<ClusterSnapshot> snapshot = cluster_.server().cluster().Snapshot();
    if (!snapshot.ok() || !snapshot->destination_registrations.count(rank)) return 0;
    return snapshot->destination_registrations.at(rank);
  }
  // Re-registers destination rank `rank` with `spec`'s memory and waits until the
  // coordinator holds the new registration.
  void RegisterAgain(int64_t rank, const v1::LayoutSpec& spec) {
    const uint64_t before = DestinationRegistration(rank);
    ASSERT_TRUE(inference_.Deregister(v1::ROLE_DESTINATION, rank).ok());
    Register(&inference_, v1::ROLE_DESTINATION, spec.ranks(rank), spec);
    ASSERT_TRUE(cluster_.Sees([&](const ClusterSnapshot& s) {
      auto it = s.destination_registrations.find(rank);
      return it != s.destination_registrations.end() && it->second != before;
    }));
  }

  bool GroupSeen(int64_t sources, int64_t destinations) {
    return cluster_.GroupSeen(sources, destinations);
  }

  // Whether every inference rank takes `version` (bounded) with every byte right (each
  // failure reported).
  bool InferenceHolds(int64_t version) {
    bool right = true;
    for (const v1::RankLayout& r : destinations_.ranks()) {
      const absl::StatusOr<int64_t> taken =
          inference_.WaitForVersion(r.rank(), version, absl::Now() + absl::Seconds(5));
      EXPECT_TRUE(taken.ok()) << taken.status();
      const int64_t wrong = transport::testing::WrongBytes(inference_.HoldBuffers().buffers(),
                                                           v1::ROLE_DESTINATION, r);
      EXPECT_EQ(wrong, 0) << "destination rank " << r.rank();
      right = right && taken.ok() && wrong == 0;
    }
    return right;
  }

  grpc::Status Refit(int64_t version, v1::RefitReport* report) {
    return cluster_.Refit(version, report);
  }

  // Publishes version 1 once the group is complete and returns why its refit failed
  // (empty, with a test failure, when it did not).
  std::string FailedRefitOfVersionOne();

  int64_t stall_ms_ = 0;  // the job's dataPlaneStallMs (0: the default), set before SetUp
  CoordinatorMetrics metrics_{std::make_shared<prometheus::Registry>()};
  DaemonMetrics inference_metrics_{std::make_shared<prometheus::Registry>(), "inference"};
  v1::JobSpec coordinator_job_;
  transport::testing::BackedLayouts backed_;
  v1::LayoutSpec sources_, destinations_;
  RankRegistry trainer_{"trainer"}, inference_{"inference"};
  // Declared after the registries: its links go first.
  testing::CoordinatorWithDaemons cluster_;
};

// Publishes `version` from every trainer with fresh bytes.
void PublishAll(RankRegistry* trainer, const v1::LayoutSpec& sources, int64_t version) {
  for (const v1::RankLayout& r : sources.ranks()) {
    transport::testing::FillViews(&trainer->HoldBuffers().mutable_buffers(), v1::ROLE_SOURCE, r);
    ASSERT_TRUE(trainer->Publish(r.rank(), version).ok());
  }
}

TEST_F(ControlPlaneTest, ARepeatMovesTheVersionAgainToARankRegisteredSinceOrSaysWhyNot) {
  ASSERT_TRUE(GroupSeen(2, 2));
  PublishAll(&trainer_, sources_, 1);
  v1::RefitReport first;
  ASSERT_TRUE(Refit(1, &first).ok());
  // Destination rank 1 comes back with new (unwritten) memory, as a restarted engine would.
  const v1::LayoutSpec fresh =
      backed_.Back(refit::testing::RowsToColumnsPair().destinations, "destination");
  RegisterAgain(1, fresh);
  EXPECT_EQ(inference_.WaitForVersion(1, 1, absl::Now() + absl::Milliseconds(200)).status().code(),
            absl::StatusCode::kDeadlineExceeded)
      << "a rank registered after the commit must not be told it holds the version";
  // The sources still hold version 1: the repeat moves it again, to every rank.
  v1::RefitReport again;
  const grpc::Status repeated = Refit(1, &again);
  ASSERT_TRUE(repeated.ok()) << repeated.error_message();
  EXPECT_NE(again.epoch_id(), first.epoch_id());
  EXPECT_TRUE(inference_.WaitForVersion(1, 1, absl::Now() + absl::Seconds(5)).ok());
  EXPECT_EQ(transport::testing::WrongBytes(inference_.HoldBuffers().buffers(), v1::ROLE_DESTINATION,
                                           fresh.ranks(1)),
            0);
  // With the same membership a repeat is answered from the report, without an epoch.
  v1::RefitReport third;
  ASSERT_TRUE(Refit(1, &third).ok());
  EXPECT_EQ(third.epoch_id(), again.epoch_id());
  // Once the sources moved on, a repeat for a changed membership cannot be honoured.
  for (const v1::RankLayout& r : sources_.ranks()) ASSERT_TRUE(trainer_.Publish(r.rank(), 2).ok());
  ASSERT_TRUE(cluster_.Sees([](const ClusterSnapshot& s) { return s.published_oldest == 2; }));
  RegisterAgain(0, fresh);
  const grpc::Status refused = Refit(1, &third);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(refused.error_message(),
              ::testing::HasSubstr("version 1 is committed, but destination ranks registered "
                                   "since do not hold it, and the source ranks no longer all "
                                   "hold it (they published versions 2 to 2)"));
}

// Ranks are told apart by their registration, not by their daemon's control session: a
// daemon that reconnects leaves the version where it was (a repeat is answered from its
// report), while trainers registered anew since the commit (restarted from a checkpoint)
// make a repeat of the version a refusal that says why, never the old report.
TEST_F(ControlPlaneTest, ARepeatAfterTheTrainersRegisteredAnewIsRefusedNotAnsweredStale) {
  ASSERT_TRUE(GroupSeen(2, 2));
  PublishAll(&trainer_, sources_, 1);
  v1::RefitReport first;
  ASSERT_TRUE(Refit(1, &first).ok());
  const uint64_t held_by = DestinationRegistration(0);
  // Both daemons reconnect (new control sessions): the same registrations come back.
  cluster_.Link(&trainer_, "trainer");
  cluster_.Link(&inference_, "inference", &inference_metrics_);
  ASSERT_TRUE(cluster_.Sees([&](const ClusterSnapshot& s) {
    return s.source_registrations.size() == 2 && s.destination_registrations.size() == 2 &&
           s.published_oldest == 1;
  }));
  EXPECT_EQ(DestinationRegistration(0), held_by);
  v1::RefitReport repeat;
  ASSERT_TRUE(Refit(1, &repeat).ok());
  EXPECT_EQ(repeat.epoch_id(), first.epoch_id()) << "a reconnect is not a new membership";

  // The trainers restart: new processes, new memory, and they publish version 1 again.
  std::map<int64_t, uint64_t> before;
  ASSERT_TRUE(cluster_.Sees([&](const ClusterSnapshot& s) {
    before = s.source_registrations;
    return true;
  }));
  const v1::LayoutSpec restarted =
      backed_.Back(refit::testing::RowsToColumnsPair().sources, "source");
  for (const v1::RankLayout& r : restarted.ranks()) {
    ASSERT_TRUE(trainer_.Deregister(v1::ROLE_SOURCE, r.rank()).ok());
    Register(&trainer_, v1::ROLE_SOURCE, r, restarted);
    ASSERT_TRUE(trainer_.Publish(r.rank(), 1).ok());
  }
  ASSERT_TRUE(cluster_.Sees([&](const ClusterSnapshot& s) {
    return s.source_registrations.size() == 2 && s.published_oldest == 1 &&
           s.source_registrations.at(0) != before.at(0) &&
           s.source_registrations.at(1) != before.at(1);
  }));
  v1::RefitReport stale;
  const grpc::Status refused = Refit(1, &stale);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
      << "answered epoch " << stale.epoch_id();
  EXPECT_THAT(refused.error_message(),
              ::testing::HasSubstr("the sources registered anew since version 1 was committed "
                                   "(source ranks 0, 1)"));
  EXPECT_THAT(refused.error_message(), ::testing::HasSubstr("publish a newer version"));
  // A newer version moves.
  for (const v1::RankLayout& r : restarted.ranks()) {
    ASSERT_TRUE(trainer_.Publish(r.rank(), 2).ok());
  }
  v1::RefitReport second;
  const grpc::Status moved = Refit(2, &second);
  ASSERT_TRUE(moved.ok()) << moved.error_message();
  EXPECT_NE(second.epoch_id(), first.epoch_id());
}

// A destination rank registered on a second node while another node holds it: the
// coordinator refuses it, and the caller hears ALREADY_EXISTS naming the node that holds
// it, as for a duplicate on the same node; nothing stays registered there.
TEST_F(ControlPlaneTest, ARankAlreadyHeldByAnotherNodeIsRefusedToItsCaller) {
  ASSERT_TRUE(GroupSeen(2, 2));
  RankRegistry other("inference-b");
  CoordinatorLink link(cluster_.address(), "inference-b", &other);
  link.Start();
  for (int i = 0; i < 250 && !link.welcomed(); ++i) absl::SleepFor(absl::Milliseconds(20));
  ASSERT_TRUE(link.welcomed());
  const v1::LayoutSpec fresh =
      backed_.Back(refit::testing::RowsToColumnsPair().destinations, "destination");
  const absl::StatusOr<std::string> refused =
      other.Register(testing::RegistrationOf(v1::ROLE_DESTINATION, fresh.ranks(0), fresh));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kAlreadyExists) << refused.status();
  EXPECT_THAT(std::string(refused.status().message()),
              ::testing::HasSubstr("destination rank 0: the coordinator refused its registration: "
                                   "destination rank 0 is already registered by daemon inference"));
  EXPECT_EQ(other.WaitForVersion(0, 1, absl::Now() + absl::Milliseconds(100)).status().code(),
            absl::StatusCode::kNotFound);
  // A rank that left the first node registers on the second, accepted.
  ASSERT_TRUE(inference_.Deregister(v1::ROLE_DESTINATION, 1).ok());
  ASSERT_TRUE(GroupSeen(2, 1));
  const absl::StatusOr<std::string> accepted =
      other.Register(testing::RegistrationOf(v1::ROLE_DESTINATION, fresh.ranks(1), fresh));
  EXPECT_TRUE(accepted.ok()) << accepted.status();
  EXPECT_TRUE(GroupSeen(2, 2));
  EXPECT_EQ(cluster_.server().cluster().DestinationRanks().at(1).node, "inference-b");
}

TEST_F(ControlPlaneTest, ARefitKeepsItsDeadlineAndACancelledOneFreesTheGroup) {
  ASSERT_TRUE(GroupSeen(2, 2));
  // Version 5 is never published: a Refit of it with a long deadline whose caller gives up
  // after 300 ms (its gRPC deadline) must not keep the group.
  const absl::Time start = absl::Now();
  {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(300));
    v1::RefitRequest request;
    request.set_version(5);
    request.set_deadline_ms(600000);
    v1::RefitReport report;
    EXPECT_EQ(cluster_.stub().Refit(&context, request, &report).error_code(),
              grpc::StatusCode::DEADLINE_EXCEEDED);
  }
  // Two Refits at once: the second waits for the first only until its own deadline.
  std::thread holder([&]() {
    grpc::ClientContext context;
    v1::RefitRequest request;
    request.set_version(6);
    request.set_deadline_ms(2500);
    v1::RefitReport report;
    cluster_.stub().Refit(&context, request, &report);
  });
  absl::SleepFor(absl::Milliseconds(300));
  const absl::Time second_start = absl::Now();
  grpc::ClientContext context;
  v1::RefitRequest request;
  request.set_version(7);
  request.set_deadline_ms(700);
  v1::RefitReport report;
  const grpc::Status second = cluster_.stub().Refit(&context, request, &report);
  const absl::Duration second_took = absl::Now() - second_start;
  EXPECT_EQ(second.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_THAT(second.error_message(), ::testing::HasSubstr("waited for a refit of version 6"));
  EXPECT_LT(second_took, absl::Milliseconds(700 + 400)) << "the deadline was not kept";
  holder.join();
  // The group is free: a published version refits at once.
  for (const v1::RankLayout& r : sources_.ranks()) {
    transport::testing::FillViews(&trainer_.HoldBuffers().mutable_buffers(), v1::ROLE_SOURCE, r);
    ASSERT_TRUE(trainer_.Publish(r.rank(), 8).ok());
  }
  const grpc::Status next = Refit(8, &report);
  EXPECT_TRUE(next.ok()) << next.error_message();
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

TEST_F(ControlPlaneTest, RefitMovesEveryByteAndCommitsTheVersion) {
  ASSERT_TRUE(GroupSeen(2, 2));
  for (const v1::RankLayout& r : sources_.ranks()) {
    transport::testing::FillViews(&trainer_.HoldBuffers().mutable_buffers(), v1::ROLE_SOURCE, r);
  }
  // The trainers publish after the refit was asked for: Refit waits for them.
  std::thread trainers([&]() {
    absl::SleepFor(absl::Milliseconds(100));
    for (const v1::RankLayout& r : sources_.ranks())
      ASSERT_TRUE(trainer_.Publish(r.rank(), 1).ok());
  });
  // A watcher started before the epoch sees it through to the commit.
  std::vector<v1::EpochProgress> seen;
  std::thread watcher([&]() {
    grpc::ClientContext context;
    v1::WatchEpochRequest request;
    request.set_timeout_ms(10000);
    auto reader = cluster_.stub().WatchEpoch(&context, request);
    v1::EpochProgress progress;
    while (reader->Read(&progress)) seen.push_back(progress);
    EXPECT_TRUE(reader->Finish().ok());
  });
  v1::RefitReport report;
  grpc::Status status = Refit(1, &report);
  trainers.join();
  watcher.join();
  ASSERT_FALSE(seen.empty());
  EXPECT_TRUE(seen.back().finished());
  EXPECT_TRUE(seen.back().committed());
  EXPECT_EQ(seen.back().epoch_id(), report.epoch_id());
  EXPECT_EQ(seen.back().bytes_done(), seen.back().bytes_total());
  EXPECT_EQ(seen.back().bytes_total(), 16 * 12 * 4 + 2 * 12 * 4);
  for (size_t i = 1; i < seen.size(); ++i) {
    EXPECT_GE(seen[i].bytes_done(), seen[i - 1].bytes_done());
  }
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(report.version(), 1);
  EXPECT_EQ(report.bytes(), 16 * 12 * 4 + 2 * 12 * 4);
  EXPECT_TRUE(InferenceHolds(1));
  // A repeat of a committed version returns its report; 0 and negative numbers are no
  // versions.
  v1::RefitReport again;
  ASSERT_TRUE(Refit(1, &again).ok());
  EXPECT_EQ(again.epoch_id(), report.epoch_id());
  // The epoch's own time (after the trainers published, 100 ms after the Refit) is part of
  // the Refit's, and a repeat says both as they were.
  EXPECT_GT(report.epoch_seconds(), 0);
  EXPECT_LT(report.epoch_seconds(), report.seconds());
  EXPECT_EQ(again.epoch_seconds(), report.epoch_seconds());
  EXPECT_EQ(again.seconds(), report.seconds());
  EXPECT_EQ(Refit(0, &again).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Refit(-1, &again).error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  grpc::ClientContext context;
  v1::StatusResponse cluster_status;
  ASSERT_TRUE(cluster_.stub().Status(&context, v1::StatusRequest(), &cluster_status).ok());
  EXPECT_EQ(cluster_status.current_version(), 1);
  EXPECT_EQ(cluster_status.daemons_size(), 2);
  // One committed epoch (the repeat did not run another), and the group in the gauges.
  EXPECT_EQ(metrics_.committed.Value(), 1);
  EXPECT_EQ(metrics_.current_version.Value(), 1);
  EXPECT_EQ(metrics_.ranks.Add({{"role", "destination"}}).Value(), 2);
  // When it was committed, and no refit was refused.
  const double now = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  EXPECT_GT(metrics_.last_commit_time.Value(), now - 60);
  EXPECT_LE(metrics_.last_commit_time.Value(), now);
  for (const char* reason : kRefusalReasons) {
    EXPECT_EQ(metrics_.refused.Add({{"reason", reason}}).Value(), 0) << reason;
  }
  // The inference daemon's gauges say which version each of its destination ranks holds
  // and since when, and forget a rank that leaves.
  for (const v1::RankLayout& r : destinations_.ranks()) {
    const prometheus::Labels rank{{"rank", std::to_string(r.rank())}};
    ASSERT_TRUE(inference_metrics_.destination_version.Has(rank));
    EXPECT_EQ(inference_metrics_.destination_version.Add(rank).Value(), 1);
    ASSERT_TRUE(inference_metrics_.destination_commit_time.Has(rank));
    EXPECT_GT(inference_metrics_.destination_commit_time.Add(rank).Value(), now - 60);
  }
  ASSERT_TRUE(inference_.Deregister(v1::ROLE_DESTINATION, 0).ok());
  EXPECT_FALSE(inference_metrics_.destination_version.Has({{"rank", "0"}}));
  EXPECT_FALSE(inference_metrics_.destination_commit_time.Has({{"rank", "0"}}));
}

// Once the group is complete the coordinator sends the plan slices ahead of the first
// epoch, and the daemons set up between epochs what it needs: the inference daemon, which
// receives the trainers' pieces into host staging (no shared memory between these two),
// holds its staging before any refit, and neither epoch allocates more.
TEST_F(ControlPlaneTest, TheDaemonsPrepareForTheFirstEpochOnceTheGroupIsComplete) {
  ASSERT_TRUE(GroupSeen(2, 2));
  const prometheus::Labels staging{{"kind", "host_staging"}};
  auto held = [&]() { return inference_metrics_.kept_memory_bytes.Add(staging).Value(); };
  auto allocations = [&]() {
    return inference_metrics_.kept_memory_allocations.Add(staging).Value();
  };
  for (int i = 0; i < 250 && held() == 0; ++i) absl::SleepFor(absl::Milliseconds(20));
  ASSERT_GT(held(), 0) << "no staging set up before the first epoch";
  const double prepared = held();
  EXPECT_EQ(allocations(), 1);
  for (const v1::RankLayout& r : sources_.ranks()) {
    transport::testing::FillViews(&trainer_.HoldBuffers().mutable_buffers(), v1::ROLE_SOURCE, r);
  }
  for (int64_t version : {1, 2}) {
    for (const v1::RankLayout& r : sources_.ranks()) {
      ASSERT_TRUE(trainer_.Publish(r.rank(), version).ok());
    }
    v1::RefitReport report;
    const grpc::Status refit = Refit(version, &report);
    ASSERT_TRUE(refit.ok()) << refit.error_message();
  }
  for (const v1::RankLayout& r : destinations_.ranks()) {
    EXPECT_EQ(
        transport::testing::WrongBytes(inference_.HoldBuffers().buffers(), v1::ROLE_DESTINATION, r),
        0)
        << "rank " << r.rank();
  }
  EXPECT_EQ(held(), prepared);
  EXPECT_EQ(allocations(), 1) << "an epoch allocated staging the preparation had not";
}

// The trainer's refitd takes 1.5 s to prepare for its slice (as creating a large outbox on
// a loaded host does) under a stall limit of 300 ms, and the first refit comes at once: the
// epoch is executed once every daemon prepared, so no peer counts the preparation as a
// stalled link.
class SlowPreparationTest : public ControlPlaneTest {
 protected:
  void SetUp() override {
    stall_ms_ = 300;
    faults::SlowPreparation("trainer", absl::Milliseconds(1500));
    ControlPlaneTest::SetUp();
  }
  void TearDown() override {
    ControlPlaneTest::TearDown();
    faults::SlowPreparation("trainer", absl::ZeroDuration());
  }
};

TEST_F(SlowPreparationTest, ADaemonStillPreparingIsNotAStalledPeer) {
  ASSERT_TRUE(GroupSeen(2, 2));
  PublishAll(&trainer_, sources_, 1);
  v1::RefitReport report;
  const grpc::Status committed = Refit(1, &report);
  ASSERT_TRUE(committed.ok()) << committed.error_message();
  EXPECT_TRUE(InferenceHolds(1));
}

// The inference node's refitd reconnects (a new session and UCX worker: a new data-plane
// address) while a refit waits for the trainers to publish: the epoch is planned again from
// the group as it is now, not sent down the old session to the old address.
TEST_F(ControlPlaneTest, ADaemonThatReconnectsWhileARefitWaitsIsPlannedAgain) {
  ASSERT_TRUE(GroupSeen(2, 2));
  const std::string before = cluster_.server().cluster().IncarnationOf("inference");
  v1::RefitReport report;
  grpc::Status committed;
  std::thread refit([&] { committed = Refit(1, &report); });
  // Not a wait for an outcome: time for the refit to take its snapshot and wait.
  absl::SleepFor(absl::Milliseconds(300));
  cluster_.Link(&inference_, "inference", &inference_metrics_);
  ASSERT_TRUE(testing::CoordinatorWithDaemons::Eventually(
      [&]() { return cluster_.server().cluster().IncarnationOf("inference") != before; }));
  ASSERT_TRUE(GroupSeen(2, 2));
  PublishAll(&trainer_, sources_, 1);
  refit.join();
  ASSERT_TRUE(committed.ok()) << committed.error_message();
  EXPECT_TRUE(InferenceHolds(1));
}

TEST_F(ControlPlaneTest, AnUnpublishedVersionFailsAtTheDeadlineNamingTheRanks) {
  ASSERT_TRUE(GroupSeen(2, 2));
  ASSERT_TRUE(trainer_.Publish(0, 4).ok());  // rank 1 never publishes
  grpc::ClientContext context;
  v1::RefitRequest request;
  request.set_version(4);
  request.set_deadline_ms(300);
  v1::RefitReport report;
  const absl::Time start = absl::Now();
  grpc::Status status = cluster_.stub().Refit(&context, request, &report);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_EQ(status.error_message(),
            "version 4 was not published by source ranks 1 before the deadline");
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  // Counted, by reason: no epoch started.
  EXPECT_EQ(metrics_.refused.Add({{"reason", "not_published"}}).Value(), 1);
  EXPECT_EQ(metrics_.aborted.Value(), 0);
}

TEST_F(ControlPlaneTest, ARankThatLeftMakesTheNextRefitFailNamingTheGap) {
  ASSERT_TRUE(GroupSeen(2, 2));
  ASSERT_TRUE(trainer_.Deregister(v1::ROLE_SOURCE, 1).ok());
  ASSERT_TRUE(GroupSeen(1, 2));
  v1::RefitReport report;
  const absl::Time start = absl::Now();
  grpc::Status status = Refit(2, &report);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  // Rank 0 holds only the top rows of w: nobody else has the rest.
  EXPECT_TRUE(absl::StartsWith(
      status.error_message(),
      "the refit group is incomplete: 1 of 2 source ranks and 2 of 2 destination ranks "
      "registered; missing source ranks 1; the other sources do not hold everything: "))
      << status.error_message();
  EXPECT_TRUE(absl::StrContains(status.error_message(), "is not covered by any source"))
      << status.error_message();
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  EXPECT_EQ(metrics_.ranks.Add({{"role", "source"}}).Value(), 1);
  EXPECT_EQ(metrics_.refused.Add({{"reason", "incomplete_group"}}).Value(), 1);
  EXPECT_EQ(inference_.WaitForVersion(0, 2, absl::Now() + absl::Milliseconds(50)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

TEST_F(ControlPlaneTest, ACorruptedViewAbortsTheEpochAndTheWaitersLearnWhatTheBuffersHold) {
  // The inference daemon restarts with the corruption-injection flag for version 1.
  cluster_.Unlink("inference");
  faults::CorruptOnTheWay("inference", 1);
  cluster_.Link(&inference_, "inference");
  ASSERT_TRUE(GroupSeen(2, 2));
  PublishAll(&trainer_, sources_, 1);
  absl::Status waited;
  std::thread waiter([&]() {
    waited = inference_.WaitForVersion(0, 1, absl::Now() + absl::Seconds(20)).status();
  });
  v1::RefitReport report;
  const grpc::Status failed = Refit(1, &report);
  waiter.join();
  EXPECT_EQ(failed.error_code(), grpc::StatusCode::DATA_LOSS) << failed.error_message();
  EXPECT_TRUE(absl::StrContains(failed.error_message(), "destination rank"))
      << failed.error_message();
  // The waiter did not sit out its deadline: it heard of the abort, and of partial writes.
  EXPECT_EQ(waited.code(), absl::StatusCode::kAborted) << waited;
  EXPECT_TRUE(absl::StrContains(waited.message(),
                                "its buffers hold version -1 and may hold "
                                "parts of version 1"))
      << waited;
  EXPECT_EQ(*inference_.PartialVersion(0), 1);
  grpc::ClientContext context;
  v1::StatusResponse status;
  ASSERT_TRUE(cluster_.stub().Status(&context, v1::StatusRequest(), &status).ok());
  EXPECT_EQ(status.current_version(), -1);
  // The next version goes through and clears the mark.
  PublishAll(&trainer_, sources_, 2);
  const grpc::Status retried = Refit(2, &report);
  ASSERT_TRUE(retried.ok()) << retried.error_message();
  for (const v1::RankLayout& r : destinations_.ranks()) {
    EXPECT_TRUE(inference_.WaitForVersion(r.rank(), 2, absl::Now() + absl::Seconds(5)).ok());
    EXPECT_EQ(*inference_.PartialVersion(r.rank()), -1);
    EXPECT_EQ(
        transport::testing::WrongBytes(inference_.HoldBuffers().buffers(), v1::ROLE_DESTINATION, r),
        0);
  }
}

// The bytes of every buffer of `ranks`, read through their own mappings.
std::vector<std::string> BufferBytes(const v1::LayoutSpec& ranks) {
  std::vector<std::string> bytes;
  for (const v1::RankLayout& r : ranks.ranks()) {
    for (const v1::BufferSpec& buffer : r.buffers()) {
      auto segment = transport::SharedMemorySegment::Open(buffer.shm_name(), buffer.bytes());
      EXPECT_TRUE(segment.ok()) << segment.status();
      if (!segment.ok()) return {};
      bytes.emplace_back(reinterpret_cast<const char*>((*segment)->data()), buffer.bytes());
    }
  }
  return bytes;
}

TEST_F(ControlPlaneTest, AStagedDestinationKeepsItsBuffersThroughAFailedEpoch) {
  // The inference ranks come back staged, on a daemon that corrupts version 1.
  for (const v1::RankLayout& r : destinations_.ranks()) {
    ASSERT_TRUE(inference_.Deregister(v1::ROLE_DESTINATION, r.rank()).ok());
  }
  cluster_.Unlink("inference");
  faults::CorruptOnTheWay("inference", 1);
  cluster_.Link(&inference_, "inference");
  for (v1::RankLayout& r : *destinations_.mutable_ranks()) {
    r.set_staged(true);
    Register(&inference_, v1::ROLE_DESTINATION, r, destinations_);
  }
  ASSERT_TRUE(GroupSeen(2, 2));
  const std::vector<std::string> before = BufferBytes(destinations_);
  ASSERT_FALSE(before.empty());

  PublishAll(&trainer_, sources_, 1);
  v1::RefitReport report;
  const grpc::Status failed = Refit(1, &report);
  EXPECT_EQ(failed.error_code(), grpc::StatusCode::DATA_LOSS) << failed.error_message();
  // Not a byte of the buffers changed, and the waiters hear that they hold no part of it.
  EXPECT_EQ(BufferBytes(destinations_), before);
  const absl::Status waited =
      inference_.WaitForVersion(0, 1, absl::Now() + absl::Milliseconds(100)).status();
  EXPECT_TRUE(absl::StrContains(waited.message(), "its buffers hold version -1")) << waited;
  EXPECT_FALSE(absl::StrContains(waited.message(), "may hold parts")) << waited;
  EXPECT_EQ(*inference_.PartialVersion(0), -1);

  // Version 2 goes through, and at the commit the buffers hold every byte of it.
  PublishAll(&trainer_, sources_, 2);
  const grpc::Status committed = Refit(2, &report);
  ASSERT_TRUE(committed.ok()) << committed.error_message();
  transport::BufferMap own(transport::testing::TensorsOf(destinations_));
  for (v1::RankLayout r : destinations_.ranks()) {
    ASSERT_TRUE(inference_.WaitForVersion(r.rank(), 2, absl::Now() + absl::Seconds(5)).ok());
    r.set_staged(false);  // this map reads the buffers themselves, not the shadows
    ASSERT_TRUE(own.AddRank(v1::ROLE_DESTINATION, r).ok());
    EXPECT_EQ(transport::testing::WrongBytes(own, v1::ROLE_DESTINATION, r), 0)
        << "destination rank " << r.rank();
  }
}

std::string ControlPlaneTest::FailedRefitOfVersionOne() {
  EXPECT_TRUE(GroupSeen(2, 2));
  PublishAll(&trainer_, sources_, 1);
  v1::RefitReport report;
  const grpc::Status failed = Refit(1, &report);
  EXPECT_FALSE(failed.ok());
  return failed.error_message();
}

// A watch named by version cannot miss its epoch: opened after the epoch ended, it hears
// at once how it ended; a version no epoch moved is not found.
TEST_F(ControlPlaneTest, AWatchByVersionOpenedAfterItsEpochEndedHearsHowItEnded) {
  ASSERT_TRUE(GroupSeen(2, 2));
  PublishAll(&trainer_, sources_, 1);
  v1::RefitReport report;
  ASSERT_TRUE(Refit(1, &report).ok());
  auto watch = [&](int64_t version, std::vector<v1::EpochProgress>* seen) {
    grpc::ClientContext context;
    v1::WatchEpochRequest request;
    request.set_version(version);
    request.set_timeout_ms(300);
    auto reader = cluster_.stub().WatchEpoch(&context, request);
    v1::EpochProgress progress;
    while (reader->Read(&progress)) seen->push_back(progress);
    return reader->Finish();
  };
  std::vector<v1::EpochProgress> seen;
  const absl::Time start = absl::Now();
  ASSERT_TRUE(watch(1, &seen).ok());
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(250));  // at once, not at the timeout
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].epoch_id(), report.epoch_id());
  EXPECT_TRUE(seen[0].finished() && seen[0].committed());
  EXPECT_EQ(seen[0].bytes_done(), seen[0].bytes_total());
  seen.clear();
  EXPECT_EQ(watch(2, &seen).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_TRUE(seen.empty());
}

// Buckets of 256 bytes (halves of 128), views of 384 or 48 bytes: every view arrives in
// parts, each part
// holds the weights' values, every byte of every view arrives once, each rank's last bucket
// comes once per epoch, and the pieces are checksummed on the way.
TEST_F(ControlPlaneTest, BucketedDestinationsTakeTheirWeightsBucketByBucket) {
  testing::BucketedRanks ranks(&inference_, destinations_, 256);
  absl::Mutex mu;
  std::map<int64_t, int64_t> bytes, wrong, lasts, buckets;
  const transport::TensorTable shapes = transport::testing::TensorsOf(destinations_);
  ranks.Attach([&](int64_t rank, const v1::Bucket& bucket, const uint8_t* memory) {
    absl::MutexLock lock(&mu);
    ++buckets[rank];
    lasts[rank] += bucket.last();
    for (const v1::BucketPiece& piece : bucket.pieces()) {
      const transport::Dims offset(piece.offset().begin(), piece.offset().end());
      const transport::Dims extent(piece.extent().begin(), piece.extent().end());
      const transport::TensorShape& shape = shapes.at(piece.tensor());
      int64_t volume = 1;
      for (int64_t e : extent) volume *= e;
      EXPECT_LE(piece.byte_offset() + volume * shape.element_bytes, 256);
      const transport::StridedRef at{const_cast<uint8_t*>(memory) + piece.byte_offset(),
                                     transport::RowMajorStrides(extent)};
      wrong[rank] += transport::WrongBytesInBox(piece.tensor(), shape.shape, shape.element_bytes,
                                                offset, extent, at, 0);
      bytes[rank] += volume * shape.element_bytes;
    }
    return std::string();
  });
  ASSERT_TRUE(GroupSeen(2, 2));
  PublishAll(&trainer_, sources_, 1);
  v1::RefitReport report;
  const grpc::Status committed = Refit(1, &report);
  ASSERT_TRUE(committed.ok()) << committed.error_message();
  EXPECT_GT(report.pieces_checksummed(), 0);
  absl::MutexLock lock(&mu);
  for (const v1::RankLayout& r : ranks.layouts()) {
    int64_t held = 0;
    for (const v1::ShardView& v : r.views()) {
      int64_t volume = shapes.at(v.tensor()).element_bytes;
      for (int64_t e : v.extent()) volume *= e;
      held += volume;
    }
    EXPECT_EQ(bytes[r.rank()], held) << "destination rank " << r.rank();
    EXPECT_EQ(wrong[r.rank()], 0) << "destination rank " << r.rank();
    EXPECT_EQ(lasts[r.rank()], 1) << "destination rank " << r.rank();
    EXPECT_GE(buckets[r.rank()], held / 128) << "destination rank " << r.rank();
  }
}

// The process of rank 1 cannot take its second bucket of version 1: the epoch fails with
// its words. The stream stays: version 2, taken whole, commits, every byte right.
TEST_F(ControlPlaneTest, ABucketedRankThatCannotTakeABucketFailsTheEpochSayingWhy) {
  testing::BucketedRanks ranks(&inference_, destinations_, 256);
  const transport::TensorTable shapes = transport::testing::TensorsOf(destinations_);
  std::atomic<int64_t> wrong{0}, lasts{0};
  ranks.Attach([&](int64_t rank, const v1::Bucket& bucket, const uint8_t* memory) {
    if (bucket.version() == 1) {
      return rank == 1 && bucket.sequence() == 2 ? std::string("the engine is asleep")
                                                 : std::string();
    }
    lasts += bucket.last();
    for (const v1::BucketPiece& piece : bucket.pieces()) {
      const transport::Dims offset(piece.offset().begin(), piece.offset().end());
      const transport::Dims extent(piece.extent().begin(), piece.extent().end());
      const transport::TensorShape& shape = shapes.at(piece.tensor());
      const transport::StridedRef at{const_cast<uint8_t*>(memory) + piece.byte_offset(),
                                     transport::RowMajorStrides(extent)};
      wrong += transport::WrongBytesInBox(piece.tensor(), shape.shape, shape.element_bytes, offset,
                                          extent, at, 0);
    }
    return std::string();
  });
  EXPECT_THAT(FailedRefitOfVersionOne(),
              ::testing::HasSubstr(
                  "destination rank 1: its process could not take bucket 2: the engine is asleep"));
  PublishAll(&trainer_, sources_, 2);
  v1::RefitReport report;
  const grpc::Status committed = Refit(2, &report);
  ASSERT_TRUE(committed.ok()) << committed.error_message();
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(lasts, 2);  // one last bucket per rank
}

// The process of rank 1 stops taking buckets (it holds its first one of version 1): the
// epoch fails within half the stall limit (10 s by default), naming the rank, not the
// daemons waiting on it.
TEST_F(ControlPlaneTest, ABucketedRankThatStopsTakingBucketsFailsTheEpochNamingIt) {
  absl::Notification release;  // outlives the ranks: their threads wait on it
  testing::BucketedRanks ranks(&inference_, destinations_, 256);
  ranks.Attach([&](int64_t rank, const v1::Bucket& bucket, const uint8_t*) {
    if (rank == 1 && bucket.version() == 1)
      release.WaitForNotificationWithTimeout(absl::Seconds(30));
    return std::string();
  });
  const absl::Time start = absl::Now();
  const std::string failure = FailedRefitOfVersionOne();
  const absl::Duration took = absl::Now() - start;
  release.Notify();
  EXPECT_THAT(failure, ::testing::HasSubstr("destination rank 1: its process took no bucket for "
                                            "5000 ms"));
  EXPECT_THAT(failure, ::testing::HasSubstr("it stopped draining its buckets"));
  EXPECT_LT(took, absl::Seconds(9)) << failure;
}

TEST_F(ControlPlaneTest, ABucketedRankWithNoStreamOpenFailsTheEpochNamingIt) {
  testing::BucketedRanks ranks(&inference_, destinations_, 256);  // never attached
  EXPECT_THAT(FailedRefitOfVersionOne(),
              ::testing::HasSubstr("receives its weights in buckets, but its process holds no "
                                   "bucket stream open"));
}

TEST_F(ControlPlaneTest, ARestartedCoordinatorRecoversTheVersionFromTheDaemons) {
  ASSERT_TRUE(GroupSeen(2, 2));
  PublishAll(&trainer_, sources_, 1);
  v1::RefitReport report;
  ASSERT_TRUE(Refit(1, &report).ok());
  // The coordinator goes away and comes back on the same address with nothing.
  ASSERT_TRUE(cluster_.RestartCoordinator(coordinator_job_).ok());
  // The daemons reconnect (backoff starts at 0.1 s) and register their ranks again.
  ASSERT_TRUE(GroupSeen(2, 2));
  grpc::ClientContext context;
  v1::StatusResponse status;
  ASSERT_TRUE(cluster_.stub().Status(&context, v1::StatusRequest(), &status).ok());
  EXPECT_EQ(status.current_version(), 1);
  // A repeat of version 1 is answered without an epoch; the next one runs.
  v1::RefitReport again;
  ASSERT_TRUE(Refit(1, &again).ok());
  EXPECT_EQ(again.version(), 1);
  PublishAll(&trainer_, sources_, 2);
  const grpc::Status next = Refit(2, &report);
  ASSERT_TRUE(next.ok()) << next.error_message();
  EXPECT_TRUE(InferenceHolds(2));
}

}  // namespace
}  // namespace refit::daemon

namespace refit::daemon {
namespace {

// refitd halves (a registry and a started coordinator link each) for `nodes`; the links
// go first when it is destroyed.
struct Daemons {
  Daemons(const std::string& coordinator, const std::vector<std::string>& nodes) {
    for (const std::string& node : nodes) {
      registries[node] = std::make_unique<RankRegistry>(node);
      links[node] = std::make_unique<CoordinatorLink>(coordinator, node, registries[node].get());
      links[node]->Start();
    }
  }
  std::map<std::string, std::unique_ptr<RankRegistry>> registries;
  std::map<std::string, std::unique_ptr<CoordinatorLink>> links;
};

// Registers every rank of both sides with the registry `registry_of` picks for it.
void RegisterAll(const v1::LayoutSpec& sources, const v1::LayoutSpec& destinations,
                 const std::function<RankRegistry*(const v1::RankLayout&)>& registry_of) {
  for (auto [spec, role] : {std::make_pair(&sources, v1::ROLE_SOURCE),
                            std::make_pair(&destinations, v1::ROLE_DESTINATION)}) {
    for (const v1::RankLayout& r : spec->ranks()) {
      v1::RegisterRankRequest request;
      request.set_role(role);
      *request.mutable_layout() = r;
      *request.mutable_tensors() = spec->tensors();
      ASSERT_TRUE(registry_of(r)->Register(request).ok()) << "rank " << r.rank();
    }
  }
}

// Two data-parallel trainers on two nodes, each holding all of the weights: when one
// node's daemon is gone, the refit takes everything from the other, without a restart.
TEST(ControlPlaneReplicasTest, ALostSourceIsPlannedAroundWhenAReplicaHoldsItsData) {
  refit::testing::LayoutBuilder src, dst;
  src.Tensor("w", {16, 12}).Replicated("w", {0, 1});
  dst.Tensor("w", {16, 12}).Chunked("w", 1, {0, 1});
  src.Rank(0, "trainer-a", 0).Rank(1, "trainer-b", 0);
  dst.Rank(0, "inference", 0).Rank(1, "inference", 1);
  transport::testing::BackedLayouts backed;
  const v1::LayoutSpec sources = backed.Back(src.spec(), "source");
  const v1::LayoutSpec destinations = backed.Back(dst.spec(), "destination");
  v1::JobSpec job;
  job.set_name("replicas");
  job.set_source_ranks(2);
  job.set_destination_ranks(2);
  auto coordinator = CoordinatorServer::Start("127.0.0.1:0", job, absl::Seconds(30));
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  const std::string address = (*coordinator)->address();
  Cluster& cluster = (*coordinator)->cluster();
  Daemons daemons(address, {"trainer-a", "trainer-b", "inference"});
  auto& [registries, links] = daemons;
  ASSERT_NO_FATAL_FAILURE(RegisterAll(
      sources, destinations, [&](const v1::RankLayout& r) { return registries[r.host()].get(); }));
  for (const v1::RankLayout& r : sources.ranks()) {
    transport::testing::FillViews(&registries[r.host()]->HoldBuffers().mutable_buffers(),
                                  v1::ROLE_SOURCE, r);
    ASSERT_TRUE(registries[r.host()]->Publish(r.rank(), 1).ok());
  }
  // Every rank is seen before one goes: a source rank never seen would not be "lost".
  ASSERT_TRUE(testing::CoordinatorWithDaemons::Eventually([&] {
    return cluster.RankCount(v1::ROLE_SOURCE) == 2 && cluster.RankCount(v1::ROLE_DESTINATION) == 2;
  }));
  // trainer-b's daemon goes away with source rank 1.
  links["trainer-b"].reset();
  ASSERT_TRUE(testing::CoordinatorWithDaemons::Eventually(
      [&] { return cluster.RankCount(v1::ROLE_SOURCE) == 1; }));
  absl::StatusOr<v1::RefitReport> report =
      client::CoordinatorClient(address).Refit(1, absl::Seconds(20));
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_THAT(report->missing_source_ranks(), ::testing::ElementsAre(1));
  for (const v1::RankLayout& r : destinations.ranks()) {
    ASSERT_TRUE(
        registries["inference"]->WaitForVersion(r.rank(), 1, absl::Now() + absl::Seconds(5)).ok());
    EXPECT_EQ(transport::testing::WrongBytes(registries["inference"]->HoldBuffers().buffers(),
                                             v1::ROLE_DESTINATION, r),
              0);
  }
  links.clear();
}

// Two data-parallel trainers whose replicas of one tensor differ: the replicas are compared
// a share of the tensors per epoch, so within sourceReplicaCheckEpochs (4) epochs exactly one
// fails naming that tensor's views, and the others commit; with 1, the first epoch fails.
TEST(ControlPlaneReplicasTest, DivergentTrainerReplicasAreCaughtWithinTheirCheckEpochs) {
  constexpr int kTensors = 8;
  refit::testing::LayoutBuilder src, dst;
  src.Rank(0, "trainer-a", 0).Rank(1, "trainer-b", 0);
  dst.Rank(0, "inference", 0).Rank(1, "inference", 1);
  for (int i = 0; i < kTensors; ++i) {
    const std::string name = absl::StrCat("w", i);
    src.Tensor(name, {16, 12}).Replicated(name, {0, 1});
    dst.Tensor(name, {16, 12}).Chunked(name, 1, {0, 1});
  }
  transport::testing::BackedLayouts backed;
  const v1::LayoutSpec sources = backed.Back(src.spec(), "source");
  const v1::LayoutSpec destinations = backed.Back(dst.spec(), "destination");
  for (const int every : {0, 1}) {  // the default (4), then every epoch
    SCOPED_TRACE(::testing::Message() << "sourceReplicaCheckEpochs " << every);
    v1::JobSpec job;
    job.set_name("replicas");
    job.set_source_ranks(2);
    job.set_destination_ranks(2);
    job.set_source_replica_check_epochs(every);
    auto coordinator = CoordinatorServer::Start("127.0.0.1:0", job, absl::Seconds(30));
    ASSERT_TRUE(coordinator.ok()) << coordinator.status();
    const std::string address = (*coordinator)->address();
    Daemons daemons(address, {"trainer-a", "trainer-b", "inference"});
    auto& [registries, links] = daemons;
    ASSERT_NO_FATAL_FAILURE(RegisterAll(sources, destinations, [&](const v1::RankLayout& r) {
      return registries[r.host()].get();
    }));
    // Both roles seen before the first refit (registrations reach the coordinator on
    // their daemons' streams, not with the registering call).
    const Cluster& cluster = (*coordinator)->cluster();
    ASSERT_TRUE(testing::CoordinatorWithDaemons::Eventually([&] {
      return cluster.RankCount(v1::ROLE_SOURCE) == 2 &&
             cluster.RankCount(v1::ROLE_DESTINATION) == 2;
    }));
    int failed = 0, committed = 0;
    for (int64_t version = 1; version <= 4; ++version) {
      for (const v1::RankLayout& r : sources.ranks()) {
        transport::BufferMap& buffers = registries[r.host()]->HoldBuffers().mutable_buffers();
        transport::testing::FillViews(&buffers, v1::ROLE_SOURCE, r);
        if (r.rank() == 1) {  // trainer-b's w5 drifted from trainer-a's
          absl::StatusOr<transport::StridedRef> byte =
              buffers.LocateForWrite(v1::ROLE_SOURCE, 1, 5, "w5", {3, 4}, {1, 1});
          ASSERT_TRUE(byte.ok()) << byte.status();
          byte->base[0] ^= 0x10;
        }
        ASSERT_TRUE(registries[r.host()]->Publish(r.rank(), version).ok());
      }
      absl::StatusOr<v1::RefitReport> report =
          client::CoordinatorClient(address).Refit(version, absl::Seconds(20));
      if (report.ok()) {
        ++committed;
        continue;
      }
      ++failed;
      EXPECT_EQ(report.status().code(), absl::StatusCode::kDataLoss) << report.status();
      EXPECT_TRUE(absl::StrContains(report.status().message(), "on w5 [0,0] + [16,12]"))
          << report.status();
      if (every == 1) break;
    }
    EXPECT_EQ(failed, 1);
    EXPECT_EQ(committed, every == 1 ? 0 : 3);
    links.clear();
  }
}

// Four daemons, random layouts spread over them by host (fused and strided buffers,
// uneven splits, replication), several epochs with both strategies: every destination
// byte right after every epoch.
TEST(ControlPlaneFourDaemonsTest, RandomLayoutsOverSeveralEpochs) {
  std::mt19937_64 rng(77);
  for (const char* strategy : {"reshard", "gather_broadcast"}) {
    for (int trial = 0; trial < 3; ++trial) {
      refit::testing::RandomLayoutOptions options;
      options.max_ranks = 8;
      refit::testing::LayoutPair pair = refit::testing::RandomLayoutPair(rng, options);
      SCOPED_TRACE(::testing::Message()
                   << strategy << " trial " << trial << ": " << pair.description);
      // Hosts -> 4 nodes: trainers and inference ranks each spread over all four.
      constexpr int kDaemons = 4;
      auto node_of = [&](const std::string& host) {
        return "node-" + std::to_string(std::hash<std::string>()(host) % kDaemons);
      };
      transport::testing::BackedLayouts backed;
      const v1::LayoutSpec sources = backed.Back(pair.sources, "source");
      const v1::LayoutSpec destinations = backed.Back(pair.destinations, "destination");

      v1::JobSpec job;
      job.set_name("four");
      job.set_source_ranks(sources.ranks_size());
      job.set_destination_ranks(destinations.ranks_size());
      job.set_strategy(strategy);
      job.set_staging_budget_bytes(1024);
      auto coordinator = CoordinatorServer::Start("127.0.0.1:0", job, absl::Seconds(30));
      ASSERT_TRUE(coordinator.ok()) << coordinator.status();
      const std::string address = (*coordinator)->address();
      Cluster& cluster = (*coordinator)->cluster();

      std::vector<std::string> nodes;
      for (int d = 0; d < kDaemons; ++d) nodes.push_back("node-" + std::to_string(d));
      Daemons daemons(address, nodes);
      auto& [registries, links] = daemons;
      ASSERT_NO_FATAL_FAILURE(RegisterAll(sources, destinations, [&](const v1::RankLayout& r) {
        return registries[node_of(r.host())].get();
      }));
      ASSERT_TRUE(testing::CoordinatorWithDaemons::Eventually([&] {
        return cluster.RankCount(v1::ROLE_SOURCE) == sources.ranks_size() &&
               cluster.RankCount(v1::ROLE_DESTINATION) == destinations.ranks_size();
      }));
      client::CoordinatorClient coordinator_client(address);
      for (int64_t version = 1; version <= 2; ++version) {
        for (const v1::RankLayout& r : sources.ranks()) {
          RankRegistry& registry = *registries[node_of(r.host())];
          transport::testing::FillViews(&registry.HoldBuffers().mutable_buffers(), v1::ROLE_SOURCE,
                                        r);
          ASSERT_TRUE(registry.Publish(r.rank(), version).ok());
        }
        absl::StatusOr<v1::RefitReport> report =
            coordinator_client.Refit(version, absl::Seconds(30));
        ASSERT_TRUE(report.ok()) << report.status();
        // The report names the daemon that finished last and the last destination rank.
        EXPECT_TRUE(absl::StartsWith(report->slowest_node(), "node-")) << report->slowest_node();
        EXPECT_GE(report->slowest_rank(), 0);
        EXPECT_LE(report->slowest_rank_seconds(), report->seconds());
        for (const v1::RankLayout& r : destinations.ranks()) {
          RankRegistry& registry = *registries[node_of(r.host())];
          ASSERT_TRUE(
              registry.WaitForVersion(r.rank(), version, absl::Now() + absl::Seconds(5)).ok());
          ASSERT_EQ(transport::testing::WrongBytes(registry.HoldBuffers().buffers(),
                                                   v1::ROLE_DESTINATION, r),
                    0)
              << "destination rank " << r.rank() << ", version " << version;
          // Scramble the destination so the next epoch must write every byte anew.
          RankRegistry::BufferHold hold = registry.HoldBuffers();
          for (int v = 0; v < r.views_size(); ++v) {
            const v1::ShardView& view = r.views(v);
            const transport::Dims offset(view.offset().begin(), view.offset().end());
            const transport::Dims extent(view.extent().begin(), view.extent().end());
            auto memory = hold.mutable_buffers().LocateForWrite(v1::ROLE_DESTINATION, r.rank(), v,
                                                                view.tensor(), offset, extent);
            ASSERT_TRUE(memory.ok());
            const transport::TensorShape& shape = hold.buffers().tensors().at(view.tensor());
            transport::FillBox(view.tensor(), shape.shape, shape.element_bytes, offset, extent,
                               *memory, /*version=*/-1);
          }
        }
      }
      links.clear();
    }
  }
}

}  // namespace
}  // namespace refit::daemon

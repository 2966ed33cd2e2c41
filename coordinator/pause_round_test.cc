// A pause round: the ranks that pause for writes asked by daemon, answers of another round
// ignored, a daemon that went away no longer awaited and its ranks named gone; late engines
// leave their replicas out (skipped, or dropped when their daemon went) while enough
// replicas are left, and refuse the refit by name otherwise.
#include "coordinator/pause_round.h"

#include "coordinator/testing/replica_policy.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace refit::daemon {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::Pair;
using testing::ReplicaPolicyOf;

// Destination ranks 0-5 on daemons 0, 0, 1, 1, 2, 2; rank 1 does not pause for writes.
ClusterSnapshot SixRanksOnThreeDaemons() {
  ClusterSnapshot snapshot;
  for (int64_t rank = 0; rank < 6; ++rank) {
    v1::RankLayout* layout = snapshot.destinations.add_ranks();
    layout->set_rank(rank);
    layout->set_pauses_for_writes(rank != 1);
    v1::RankPlacement& p = snapshot.placement.emplace_back();
    p.set_role(v1::ROLE_DESTINATION);
    p.set_rank(rank);
    p.set_daemon(static_cast<int32_t>(rank / 2));
  }
  return snapshot;
}

v1::RanksPaused Paused(const std::string& id, std::vector<int64_t> ranks) {
  v1::RanksPaused paused;
  paused.set_pause_id(id);
  for (int64_t rank : ranks) paused.add_ranks(rank);
  return paused;
}

TEST(PauseRoundTest, AsksEachDaemonForItsRanksThatPause) {
  const std::map<int32_t, std::vector<int64_t>> by_daemon =
      PauseRound::RanksToAsk(SixRanksOnThreeDaemons());
  EXPECT_THAT(by_daemon, ElementsAre(Pair(0, ElementsAre(0)), Pair(1, ElementsAre(2, 3)),
                                     Pair(2, ElementsAre(4, 5))));
  const PauseRound round("job-pause-1", by_daemon);
  EXPECT_THAT(round.Asked(), ElementsAre(0, 2, 3, 4, 5));
  const std::map<int32_t, v1::CoordinatorMessage> requests = round.Requests(7, 500);
  ASSERT_EQ(requests.size(), 3u);
  const v1::PauseRanks& to_daemon_1 = requests.at(1).pause();
  EXPECT_EQ(to_daemon_1.pause_id(), "job-pause-1");
  EXPECT_EQ(to_daemon_1.version(), 7);
  EXPECT_EQ(to_daemon_1.deadline_ms(), 500);
  EXPECT_THAT(to_daemon_1.ranks(), ElementsAre(2, 3));
  EXPECT_FALSE(round.Answered());
}

TEST(PauseRoundTest, AnswersOfAnotherRoundAreIgnoredAndALostDaemonIsNoLongerAwaited) {
  PauseRound round("r-2", PauseRound::RanksToAsk(SixRanksOnThreeDaemons()));
  round.OnPaused(0, Paused("r-1", {0}));  // an answer to the round before
  round.OnPaused(0, Paused("r-2", {0}));
  round.OnPaused(1, Paused("r-2", {2}));  // rank 3's engine did not pause
  EXPECT_FALSE(round.Answered());
  round.OnDaemonLost(2);
  round.OnDaemonLost(0);  // answered already: not gone
  EXPECT_TRUE(round.Answered());
  const PauseRound::Late late = round.LateRanks();
  EXPECT_THAT(late.ranks, ElementsAre(3, 4, 5));
  EXPECT_THAT(late.gone, ElementsAre(4, 5));
}

TEST(PauseRoundTest, LateEnginesWithoutReplicasRefuseTheRefit) {
  const LateEngines decision =
      LeaveOutLate(4, {{2, 3}, {}}, {0, 2, 3}, {0}, nullptr, 1, absl::Milliseconds(500));
  EXPECT_EQ(decision.refusal.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(decision.refusal.message(),
            "the engines of destination ranks 2, 3 did not pause for version 4 within 500 ms");
}

TEST(PauseRoundTest, LateReplicasAreSkippedOrDroppedWhileEnoughAreLeft) {
  // Replicas of two ranks: 0 (ranks 0-1), 1 (2-3), 2 (4-5), 3 (6-7); two needed.
  const DestinationReplicas replicas(ReplicaPolicyOf(2, 2), 8);
  // Replica 1's engine was slow; replica 2's daemon went away.
  const LateEngines decision = LeaveOutLate(9, {{3, 4, 5}, {4, 5}}, {0, 1, 2, 3, 4, 5, 6, 7},
                                            {0, 1, 2, 3}, &replicas, 2, absl::Seconds(2));
  ASSERT_TRUE(decision.refusal.ok()) << decision.refusal;
  EXPECT_EQ(decision.what,
            "the refitd of destination ranks 4, 5 went away while they were asked to pause; the "
            "engines of destination ranks 3 did not pause for version 9 within 2000 ms");
  EXPECT_THAT(decision.skipped, ElementsAre(1));
  EXPECT_THAT(decision.dropped, ElementsAre(2));
  EXPECT_THAT(decision.left, ElementsAre(0, 3));
  EXPECT_THAT(decision.resumed, ElementsAre(2, 3, 4, 5));
}

TEST(PauseRoundTest, TooFewReplicasLeftRefuseTheRefitSayingHowMany) {
  const DestinationReplicas replicas(ReplicaPolicyOf(2, 2), 4);
  const LateEngines decision =
      LeaveOutLate(3, {{1}, {}}, {0, 1, 2, 3}, {0, 1}, &replicas, 2, absl::Milliseconds(100));
  EXPECT_EQ(decision.refusal.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(decision.refusal.message(),
            "the engines of destination ranks 1 did not pause for version 3 within 100 ms; 1 "
            "replicas left of the 2 needed");
  EXPECT_THAT(decision.resumed, IsEmpty());
}

}  // namespace
}  // namespace refit::daemon

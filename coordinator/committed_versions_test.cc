// What the coordinator committed: a repeat of the committed version answered with its report
// only for the ranks it went to, moved again or refused by name otherwise; sources
// registered anew refuse a repeat; a restarted coordinator finds the holders from what the
// daemons said; a catch-up joins the version's record; reports and outcomes are bounded.
#include "coordinator/committed_versions.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace refit::daemon {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

v1::RefitReport ReportOf(int64_t version, const std::string& epoch_id,
                         std::vector<int64_t> replicas = {}) {
  v1::RefitReport report;
  report.set_version(version);
  report.set_epoch_id(epoch_id);
  for (int64_t replica : replicas) report.add_replicas(replica);
  return report;
}

// A snapshot of the group now: destination and source registrations and what the sources
// published.
ClusterSnapshot Group(std::map<int64_t, uint64_t> destinations, std::map<int64_t, uint64_t> sources,
                      int64_t published_oldest, int64_t published_newest) {
  ClusterSnapshot snapshot;
  snapshot.destination_registrations = std::move(destinations);
  snapshot.source_registrations = std::move(sources);
  snapshot.published_oldest = published_oldest;
  snapshot.published_newest = published_newest;
  return snapshot;
}

Cluster::DestinationRank Rank(uint64_t registration, int64_t held_version) {
  Cluster::DestinationRank rank;
  rank.node = "node";
  rank.registration = registration;
  rank.held_version = held_version;
  return rank;
}

TEST(CommittedVersionsTest, ARefitOfAnotherVersionIsNew) {
  CommittedVersions committed;
  EXPECT_EQ(committed.current(), -1);
  EXPECT_EQ(committed.AnswerRepeat(1, Group({}, {}, 1, 1)).kind, CommittedVersions::Repeat::kNew);
  committed.Commit(ReportOf(3, "job-1"), "digest-a", {{0, 10}}, {{0, 20}});
  EXPECT_EQ(committed.current(), 3);
  EXPECT_EQ(committed.plan_digest(), "digest-a");
  EXPECT_EQ(committed.AnswerRepeat(4, Group({{0, 10}}, {{0, 20}}, 4, 4)).kind,
            CommittedVersions::Repeat::kNew);
  EXPECT_TRUE(committed.CheckNotOlder(3).ok());
  const absl::Status older = committed.CheckNotOlder(2);
  EXPECT_EQ(older.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(older.message(), "version 2 is older than the committed version 3");
}

TEST(CommittedVersionsTest, ARepeatIsAnsweredOnlyForTheRanksTheVersionWentTo) {
  CommittedVersions committed;
  committed.Commit(ReportOf(5, "job-7"), "d", {{0, 10}, {1, 11}}, {{0, 20}});
  // A rank that left since does not matter.
  CommittedVersions::Repeat same = committed.AnswerRepeat(5, Group({{0, 10}}, {{0, 20}}, 5, 5));
  ASSERT_EQ(same.kind, CommittedVersions::Repeat::kAnswered);
  EXPECT_EQ(same.report.epoch_id(), "job-7");
  // Rank 1 registered anew: the version moves again while the sources hold it ...
  CommittedVersions::Repeat again =
      committed.AnswerRepeat(5, Group({{0, 10}, {1, 12}}, {{0, 20}}, 5, 5));
  EXPECT_EQ(again.kind, CommittedVersions::Repeat::kMoveAgain);
  EXPECT_EQ(again.why, "destination ranks registered since do not hold it");
  // ... and is refused, naming what they published, once they moved on.
  CommittedVersions::Repeat gone =
      committed.AnswerRepeat(5, Group({{0, 10}, {1, 12}}, {{0, 20}}, 5, 6));
  ASSERT_EQ(gone.kind, CommittedVersions::Repeat::kRefused);
  EXPECT_EQ(gone.refusal.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(gone.refusal.message(),
              HasSubstr("version 5 is committed, but destination ranks registered since do not "
                        "hold it, and the source ranks no longer all hold it (they published "
                        "versions 5 to 6): refit a newer version"));
}

TEST(CommittedVersionsTest, SourcesRegisteredAnewRefuseARepeatByRank) {
  CommittedVersions committed;
  std::map<int64_t, uint64_t> sources;
  for (int64_t rank = 0; rank < 12; ++rank) sources[rank] = 100 + rank;
  committed.Commit(ReportOf(2, "job-2"), "d", {{0, 10}}, sources);
  EXPECT_TRUE(committed.CheckSourcesUnchanged(2, sources).ok());
  // Unknown versions cannot be told apart: not refused.
  EXPECT_TRUE(committed.CheckSourcesUnchanged(1, {}).ok());
  std::map<int64_t, uint64_t> one_anew = sources;
  one_anew[3] = 999;
  CommittedVersions::Repeat repeat = committed.AnswerRepeat(2, Group({{0, 10}}, one_anew, 2, 2));
  ASSERT_EQ(repeat.kind, CommittedVersions::Repeat::kRefused);
  EXPECT_THAT(repeat.refusal.message(),
              HasSubstr("the sources registered anew since version 2 was committed (source rank "
                        "3): their weights may not be the ones the destinations hold as version "
                        "2; publish a newer version"));
  // Many: eight named, the rest counted.
  std::map<int64_t, uint64_t> all_anew;
  for (int64_t rank = 0; rank < 12; ++rank) all_anew[rank] = 200 + rank;
  EXPECT_THAT(committed.CheckSourcesUnchanged(2, all_anew).message(),
              HasSubstr("(source ranks 0, 1, 2, 3, 4, 5, 6, 7 and 4 more)"));
}

TEST(CommittedVersionsTest, ARestartedCoordinatorTakesTheHoldersFromTheDaemons) {
  CommittedVersions committed;
  committed.Recover(4);  // the daemons said version 4 is committed
  EXPECT_EQ(committed.current(), 4);
  committed.Recover(2);  // never backwards
  EXPECT_EQ(committed.current(), 4);
  const std::map<int64_t, Cluster::DestinationRank> ranks = {
      {0, Rank(10, 4)}, {1, Rank(11, 3)}, {2, Rank(12, 0)}};
  EXPECT_THAT(committed.Holders(ranks, 4), ElementsAre(Pair(0, 10)));
  // No report to answer with: moved again, saying why.
  CommittedVersions::Repeat repeat = committed.AnswerRepeat(4, Group({{0, 10}}, {{0, 1}}, 4, 4));
  EXPECT_EQ(repeat.kind, CommittedVersions::Repeat::kMoveAgain);
  EXPECT_EQ(repeat.why,
            "the coordinator cannot tell which destination ranks hold it (it restarted)");
  // Nothing committed: nobody holds anything.
  EXPECT_TRUE(CommittedVersions().Holders(ranks, -1).empty());
}

TEST(CommittedVersionsTest, ACatchUpJoinsTheVersionsRecord) {
  CommittedVersions committed;
  committed.Commit(ReportOf(6, "job-3", {0, 2}), "d", {{0, 10}, {1, 11}, {4, 14}, {5, 15}},
                   {{0, 20}});
  committed.CaughtUp(ReportOf(6, "job-4", {1}), {}, -1, {{2, 12}, {3, 13}}, {{0, 20}});
  const CommittedVersions::Committed* record = committed.Find(6);
  ASSERT_NE(record, nullptr);
  EXPECT_EQ(record->report.epoch_id(), "job-3");  // the version's own report stays
  EXPECT_THAT(record->report.replicas(), ElementsAre(0, 1, 2));
  EXPECT_THAT(record->destinations, ElementsAre(Pair(0, 10), Pair(1, 11), Pair(2, 12), Pair(3, 13),
                                                Pair(4, 14), Pair(5, 15)));
  EXPECT_EQ(committed.current(), 6);
  EXPECT_EQ(committed.plan_digest(), "d");
}

TEST(CommittedVersionsTest, ACatchUpToAVersionCommittedBeforeTheRestartKeepsItsHolders) {
  CommittedVersions committed;
  committed.Recover(8);
  const std::map<int64_t, Cluster::DestinationRank> ranks = {
      {0, Rank(10, 8)}, {1, Rank(11, 8)}, {2, Rank(12, 7)}, {3, Rank(13, 7)}};
  committed.CaughtUp(ReportOf(8, "job-1", {1}), ranks, 8, {{2, 12}, {3, 13}}, {{0, 30}});
  const CommittedVersions::Committed* record = committed.Find(8);
  ASSERT_NE(record, nullptr);
  EXPECT_EQ(record->report.epoch_id(), "job-1");
  EXPECT_THAT(record->destinations,
              ElementsAre(Pair(0, 10), Pair(1, 11), Pair(2, 12), Pair(3, 13)));
  EXPECT_THAT(record->sources, ElementsAre(Pair(0, 30)));
  // Every rank holds it now: a repeat is answered.
  EXPECT_EQ(
      committed.AnswerRepeat(8, Group({{0, 10}, {1, 11}, {2, 12}, {3, 13}}, {{0, 30}}, 8, 8)).kind,
      CommittedVersions::Repeat::kAnswered);
}

TEST(CommittedVersionsTest, ReportsAndOutcomesAreBoundedNewestKept) {
  CommittedVersions committed;
  const int64_t versions = CommittedVersions::kReportsKept + 6;
  for (int64_t version = 1; version <= versions; ++version) {
    committed.Commit(ReportOf(version, absl::StrCat("job-", version)), "d", {}, {});
  }
  EXPECT_EQ(committed.Find(6), nullptr);
  EXPECT_NE(committed.Find(7), nullptr);
  std::vector<int64_t> newest;
  for (const v1::RefitReport& report : committed.Newest(3)) newest.push_back(report.version());
  EXPECT_THAT(newest, ElementsAre(versions, versions - 1, versions - 2));

  committed.Decided("job-0", true);
  committed.Decided("job-0", false);  // the first word stands
  EXPECT_EQ(committed.OutcomeOf("job-0"), true);
  EXPECT_EQ(committed.OutcomeOf("job-x"), std::nullopt);
  for (size_t i = 1; i <= CommittedVersions::kOutcomesKept; ++i) {
    committed.Decided(absl::StrCat("later-", i), false);
  }
  EXPECT_EQ(committed.OutcomeOf("job-0"), std::nullopt);  // the oldest forgotten
  EXPECT_EQ(committed.OutcomeOf("later-1"), false);
}

}  // namespace
}  // namespace refit::daemon

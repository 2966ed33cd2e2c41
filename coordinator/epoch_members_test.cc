// The replicas a refit writes as its attempts lose some: dropped and skipped ones leave
// the members in order, and an attempt goes on only while enough are left (one for a
// catch-up). Which replicas a refit writes in the first place: every complete one for a new
// version, those lacking it for a repeat of the committed one, or an answer or a refusal
// (transcripts written from EpochRunner's behaviour before ChooseMembers was taken out).
#include "coordinator/epoch_members.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace refit::daemon {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(EpochMembersTest, ARefitGoesOnWhileItsMinimumOfReplicasIsLeft) {
  EpochMembers members({0, 1, 2, 3}, /*catch_up=*/false, /*min_replicas=*/2);
  EXPECT_EQ(members.needed(), 2u);
  EXPECT_THAT(members.Without({1, 3}), ElementsAre(0, 2));
  EXPECT_TRUE(members.EnoughWithout({1, 3}));
  EXPECT_FALSE(members.EnoughWithout({0, 1, 3}));
  EXPECT_TRUE(members.EnoughWithout({7}));  // not a member: nothing lost
  members.Drop({1});
  members.Skip({3});
  EXPECT_THAT(members.replicas(), ElementsAre(0, 2));
  EXPECT_THAT(members.dropped(), ElementsAre(1));
  EXPECT_THAT(members.skipped(), ElementsAre(3));
  EXPECT_TRUE(members.LeftSomeBehind());
  EXPECT_FALSE(members.EnoughWithout({2}));
  EXPECT_EQ(members.Describe(), " to replicas 0, 2, dropped replica 1, skipped replica 3");
}

TEST(EpochMembersTest, ACatchUpNeedsOneReplicaLeft) {
  EpochMembers members({2, 5}, /*catch_up=*/true, /*min_replicas=*/4);
  EXPECT_EQ(members.needed(), 1u);
  EXPECT_TRUE(members.EnoughWithout({5}));
  EXPECT_FALSE(members.EnoughWithout({2, 5}));
  EXPECT_FALSE(members.LeftSomeBehind());
  EXPECT_EQ(members.Describe(), " (a catch-up) to replicas 2, 5");
}

TEST(EpochMembersTest, DropsAccumulateOverAttemptsInTheOrderTheyCame) {
  EpochMembers members({0, 1, 2, 3, 4}, /*catch_up=*/false, /*min_replicas=*/1);
  members.Drop({3});
  members.Drop({0, 4});
  EXPECT_THAT(members.replicas(), ElementsAre(1, 2));
  EXPECT_THAT(members.dropped(), ElementsAre(3, 0, 4));
  EXPECT_THAT(members.skipped(), IsEmpty());
}

TEST(EpochMembersTest, AJobWithoutReplicasHasNoMembersAndNeedsOne) {
  const EpochMembers members;
  EXPECT_THAT(members.replicas(), IsEmpty());
  EXPECT_EQ(members.needed(), 1u);
  EXPECT_FALSE(members.catch_up());
}

// Four complete replicas, two needed, sources at version 7.
MemberFacts NewVersion7() {
  MemberFacts facts;
  facts.version = 7;
  facts.complete = {0, 1, 2, 3};
  facts.min_replicas = 2;
  facts.published_oldest = facts.published_newest = 7;
  return facts;
}

TEST(ChooseMembersTest, ANewVersionGoesToEveryCompleteReplica) {
  const MemberChoice choice = ChooseMembers(NewVersion7());
  ASSERT_TRUE(choice.refusal.ok()) << choice.refusal;
  EXPECT_FALSE(choice.answer_with_report);
  EXPECT_THAT(choice.members.replicas(), ElementsAre(0, 1, 2, 3));
  EXPECT_FALSE(choice.members.catch_up());
  EXPECT_EQ(choice.members.needed(), 2u);
}

TEST(ChooseMembersTest, TooFewCompleteReplicasRefuseANewVersion) {
  MemberFacts facts = NewVersion7();
  facts.complete = {2};
  facts.enough = absl::FailedPreconditionError("1 of the 2 replicas needed are complete");
  const MemberChoice choice = ChooseMembers(facts);
  EXPECT_EQ(choice.refusal, facts.enough);
  EXPECT_STREQ(choice.refusal_reason, "incomplete_group");
}

TEST(ChooseMembersTest, ARepeatGoesOnlyToTheReplicasLackingItAsACatchUpOfOne) {
  MemberFacts facts = NewVersion7();
  facts.repeat = true;
  facts.lacking = {3};
  facts.report_kept = true;
  // Too few complete for a new version, but a catch-up needs one.
  facts.enough = absl::FailedPreconditionError("not enough");
  const MemberChoice choice = ChooseMembers(facts);
  ASSERT_TRUE(choice.refusal.ok()) << choice.refusal;
  EXPECT_THAT(choice.members.replicas(), ElementsAre(3));
  EXPECT_TRUE(choice.members.catch_up());
  EXPECT_EQ(choice.members.needed(), 1u);
}

TEST(ChooseMembersTest, ARepeatEveryReplicaHoldsIsAnsweredFromItsReport) {
  MemberFacts facts = NewVersion7();
  facts.repeat = true;
  facts.report_kept = true;
  const MemberChoice choice = ChooseMembers(facts);
  EXPECT_TRUE(choice.answer_with_report);
  EXPECT_TRUE(choice.refusal.ok());
}

TEST(ChooseMembersTest, WithoutItsReportARepeatMovesTheVersionAgainToAll) {
  // A restarted coordinator: every replica holds the version, but there is no report.
  MemberFacts facts = NewVersion7();
  facts.repeat = true;
  const MemberChoice choice = ChooseMembers(facts);
  ASSERT_TRUE(choice.refusal.ok()) << choice.refusal;
  EXPECT_FALSE(choice.answer_with_report);
  EXPECT_THAT(choice.members.replicas(), ElementsAre(0, 1, 2, 3));
  EXPECT_FALSE(choice.members.catch_up());
}

TEST(ChooseMembersTest, ARepeatIsRefusedAsStaleWhenTheSourcesMovedOn) {
  MemberFacts facts = NewVersion7();
  facts.repeat = true;
  facts.sources_unchanged = absl::FailedPreconditionError("source rank 1 registered anew");
  MemberChoice choice = ChooseMembers(facts);
  EXPECT_EQ(choice.refusal, facts.sources_unchanged);
  EXPECT_STREQ(choice.refusal_reason, "stale_version");

  facts.sources_unchanged = absl::OkStatus();
  facts.lacking = {1, 2};
  facts.published_newest = 8;
  choice = ChooseMembers(facts);
  EXPECT_STREQ(choice.refusal_reason, "stale_version");
  EXPECT_EQ(choice.refusal.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(choice.refusal.message(),
            "version 7 is committed, but replicas 1, 2 lack it, and the source ranks no longer "
            "all hold it (they published versions 7 to 8): refit a newer version");
}

}  // namespace
}  // namespace refit::daemon

// Held replicas: a replica held anew has its ranks told why, once; held again for the
// same reason and registrations, nothing is said; one no longer held has its ranks that
// kept their registration told they are accepted; a held replica stays out of a census
// until a rank registers anew.
#include "coordinator/held_replicas.h"

#include "coordinator/testing/replica_policy.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace refit::daemon {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::Pair;
using testing::ReplicaPolicyOf;

// "rank:held" or "rank:accepted" for each answer.
std::vector<std::string> Told(const std::vector<v1::RegistrationAnswer>& answers) {
  std::vector<std::string> told;
  for (const v1::RegistrationAnswer& answer : answers) {
    EXPECT_TRUE(answer.accepted());
    EXPECT_EQ(answer.role(), v1::ROLE_DESTINATION);
    told.push_back(absl::StrCat(answer.rank(), "@", answer.registration_id(), ":",
                                answer.held() ? answer.refusal() : "accepted"));
  }
  return told;
}

TEST(HeldReplicasTest, RanksHearOnceWhenTheirReplicaIsHeldAndWhenItNoLongerIs) {
  const DestinationReplicas replicas(ReplicaPolicyOf(2), 6);  // replicas 0-2 of ranks 0-1, 2-3, 4-5
  std::map<int64_t, uint64_t> registrations = {{0, 10}, {1, 11}, {2, 12},
                                               {3, 13}, {4, 14}, {5, 15}};
  ReplicaVetting vetting;
  vetting.fit = {0, 2};
  vetting.held[1] = absl::InvalidArgumentError("replica 1 declares w as F16");
  HeldReplicas held;
  std::vector<int64_t> newly;
  const std::map<int64_t, HeldReplicas::Held> now =
      HeldReplicas::FromVetting(vetting, replicas, registrations);
  EXPECT_THAT(now.at(1).registrations, ElementsAre(Pair(2, 12), Pair(3, 13)));
  std::vector<v1::RegistrationAnswer> answers = held.Update(now, registrations, &newly);
  EXPECT_THAT(newly, ElementsAre(1));
  EXPECT_THAT(Told(answers),
              ElementsAre("2@12:replica 1 declares w as F16", "3@13:replica 1 declares w as F16"));
  EXPECT_EQ(answers[0].code(), static_cast<int32_t>(absl::StatusCode::kInvalidArgument));

  // The same vetting again: nothing to say.
  answers = held.Update(HeldReplicas::FromVetting(vetting, replicas, registrations), registrations,
                        &newly);
  EXPECT_THAT(newly, IsEmpty());
  EXPECT_THAT(answers, IsEmpty());

  // Rank 3 registered anew with the right declaration: replica 1 fits; rank 2 (same
  // registration) hears it is accepted; rank 3's new registration was answered when it came.
  registrations[3] = 23;
  vetting.fit = {0, 1, 2};
  vetting.held.clear();
  answers = held.Update(HeldReplicas::FromVetting(vetting, replicas, registrations), registrations,
                        &newly);
  EXPECT_THAT(newly, IsEmpty());
  EXPECT_THAT(Told(answers), ElementsAre("2@12:accepted"));
  EXPECT_THAT(held.held(), IsEmpty());
}

TEST(HeldReplicasTest, AHeldReplicaStaysOutOfACensusUntilARankRegistersAnew) {
  const DestinationReplicas replicas(ReplicaPolicyOf(2), 4);
  std::map<int64_t, uint64_t> registrations = {{0, 10}, {1, 11}, {2, 12}, {3, 13}};
  ReplicaVetting vetting;
  vetting.fit = {0};
  vetting.held[1] = absl::FailedPreconditionError("replica 1 declares FP8");
  HeldReplicas held;
  std::vector<int64_t> newly;
  held.Update(HeldReplicas::FromVetting(vetting, replicas, registrations), registrations, &newly);

  ReplicaCensus census = replicas.Census({0, 1, 2, 3});
  held.Exclude(replicas, registrations, &census);
  EXPECT_THAT(census.complete, ElementsAre(0));
  EXPECT_THAT(census.held, ElementsAre(Pair(1, "replica 1 declares FP8")));

  registrations[2] = 22;  // registered anew: perhaps fixed, vetted again
  census = replicas.Census({0, 1, 2, 3});
  held.Exclude(replicas, registrations, &census);
  EXPECT_THAT(census.complete, ElementsAre(0, 1));
  EXPECT_THAT(census.held, IsEmpty());
}

}  // namespace
}  // namespace refit::daemon

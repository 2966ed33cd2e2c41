// Destination replicas: the census of a registration (complete, incomplete with the ranks
// missing, expected but absent), the minimum refused by name, a replica that does not hold
// a tensor whole refused by name, and an epoch's snapshot narrowed to its replicas.
#include "coordinator/destination_replicas.h"

#include "coordinator/testing/replica_policy.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/testing/layout_builder.h"

namespace refit::daemon {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;
using testing::ReplicaPolicyOf;

TEST(DestinationReplicasTest, TheCensusNamesCompleteIncompleteAndAbsentReplicas) {
  // Four replicas of two ranks expected; replica 4 is beyond the job's count and welcome.
  const DestinationReplicas replicas(ReplicaPolicyOf(2, 2), 8);
  const ReplicaCensus census = replicas.Census({0, 1, 3, 8, 9});
  EXPECT_THAT(census.complete, ElementsAre(0, 4));
  EXPECT_THAT(census.incomplete, ElementsAre(Pair(1, ElementsAre(2))));
  EXPECT_THAT(census.absent, ElementsAre(2, 3));
  EXPECT_TRUE(replicas.CheckEnough(census).ok());
  EXPECT_EQ(replicas.Describe(1), "replica 1 (destination ranks 2-3)");
  EXPECT_THAT(replicas.RanksOf({1, 4}), ElementsAre(2, 3, 8, 9));
}

TEST(DestinationReplicasTest, AReplicaLacksAVersionWhenARankIsNewOrRegisteredAnew) {
  const DestinationReplicas replicas(ReplicaPolicyOf(2, 1), 6);
  // Committed to ranks 0-3 (registrations 10-13); rank 1 registered anew since (21), rank 5
  // is new, rank 3 has left.
  const std::map<int64_t, uint64_t> holders = {{0, 10}, {1, 11}, {2, 12}, {3, 13}};
  const std::map<int64_t, uint64_t> now = {{0, 10}, {1, 21}, {2, 12}, {4, 14}, {5, 15}};
  EXPECT_THAT(replicas.Lacking({0, 1, 2}, holders, now), ElementsAre(0, 1, 2));
  EXPECT_THAT(replicas.Lacking({0, 1, 2}, holders, holders), ElementsAre(2));  // no rank 4, 5
  EXPECT_TRUE(replicas.Lacking({0, 1}, holders, holders).empty());
}

TEST(DestinationReplicasTest, FewerCompleteReplicasThanTheMinimumAreRefusedSayingWhatIsMissing) {
  const DestinationReplicas replicas(ReplicaPolicyOf(2, 3), 8);
  const absl::Status status = replicas.CheckEnough(replicas.Census({0, 1, 3, 4, 5}));
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(),
              HasSubstr("2 complete destination replicas of the 3 it needs (2 ranks each); "
                        "complete: 0, 2; replica 1 (destination ranks 2-3) misses ranks 2; "
                        "absent: 3"));
}

TEST(DestinationReplicasTest, AnEpochSnapshotKeepsOnlyItsReplicasAndTheirDaemons) {
  refit::testing::LayoutBuilder layout;
  layout.Tensor("w", {4}).Replicated("w", {0, 1, 2});
  ClusterSnapshot snapshot;
  snapshot.destinations = layout.spec();
  for (int64_t rank : {0, 1, 2}) {
    v1::RankPlacement& p = snapshot.placement.emplace_back();
    p.set_role(v1::ROLE_DESTINATION);
    p.set_rank(rank);
    p.set_daemon(static_cast<int32_t>(rank + 1));
    snapshot.destination_registrations[rank] = 100 + rank;
    snapshot.shared_destinations[rank] = layout.spec().ranks(rank);
    snapshot.channels[static_cast<int32_t>(rank + 1)] = nullptr;
  }
  v1::RankPlacement& source = snapshot.placement.emplace_back();
  source.set_role(v1::ROLE_SOURCE);
  source.set_rank(0);
  source.set_daemon(0);
  snapshot.channels[0] = nullptr;
  NarrowDestinations({0, 2}, &snapshot);
  ASSERT_EQ(snapshot.destinations.ranks_size(), 2);
  EXPECT_EQ(snapshot.destinations.ranks(1).rank(), 2);
  EXPECT_THAT(snapshot.destination_registrations, ElementsAre(Pair(0, 100), Pair(2, 102)));
  EXPECT_EQ(snapshot.shared_destinations.size(), 2u);
  EXPECT_EQ(snapshot.placement.size(), 3u);
  std::vector<int32_t> daemons;
  for (const auto& [index, channel] : snapshot.channels) daemons.push_back(index);
  EXPECT_THAT(daemons, ElementsAre(0, 1, 3));  // daemon 2 held only rank 1
}

TEST(DestinationReplicasTest, AnEpochSnapshotKeepsTheTensorsItsRanksDeclare) {
  // Rank 1 (a replica left out) declares w otherwise and a tensor of its own.
  refit::testing::LayoutBuilder layout;
  layout.Tensor("w", {4}).Tensor("typo", {4}).Replicated("w", {0, 2}).Replicated("typo", {1});
  ClusterSnapshot snapshot;
  snapshot.destinations = layout.spec();
  snapshot.destinations_disagree = true;
  for (int64_t rank : {0, 1, 2}) {
    auto declared = std::make_shared<v1::RankRegistration>();
    *declared->add_tensors() = layout.spec().tensors(rank == 1 ? 1 : 0);
    if (rank == 1) {
      v1::TensorSpec* w = declared->add_tensors();
      *w = layout.spec().tensors(0);
      w->set_dtype("BF16");
    }
    snapshot.destination_declarations[rank] = declared;
  }
  NarrowDestinations({0, 2}, &snapshot);
  ASSERT_EQ(snapshot.destinations.tensors_size(), 1);
  EXPECT_EQ(snapshot.destinations.tensors(0).name(), "w");
  EXPECT_EQ(snapshot.destinations.tensors(0).dtype(), "F32");
  EXPECT_FALSE(snapshot.destinations_disagree);
  EXPECT_EQ(snapshot.destination_declarations.size(), 2u);
}

}  // namespace
}  // namespace refit::daemon

// Same-host peers' destination ranks, mapped over real shared-memory segments: what the
// map writes lands in the rank's own segment, a warm update maps nothing, a rank that
// registered again (new names, or new segments under the old ones, or a changed model) is
// mapped again, one no longer listed is let go, and a segment that
// cannot be mapped is an error naming the rank, with nothing left to write straight into.
#include "transport/peer_destinations.h"

#include <unistd.h>

#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "planner/testing/layout_builder.h"
#include "transport/shared_memory.h"
#include "transport/testing/backed_layouts.h"

namespace refit::transport {
namespace {

// Three destination ranks of a [rows, 8] F32 tensor "w", a row block each of its first four
// rows (rank 2 holds two).
v1::LayoutSpec ThreeRanks(testing::BackedLayouts* backed, int64_t rows = 4) {
  refit::testing::LayoutBuilder builder;
  builder.Tensor("w", {rows, 8});
  builder.Rank(0, "node").View(0, "w", {0, 0}, {1, 8});
  builder.Rank(1, "node").View(1, "w", {1, 0}, {1, 8});
  builder.Rank(2, "node").View(2, "w", {2, 0}, {2, 8});
  return backed->Back(builder.spec(), "destination");
}

// Rank 0 on daemon 0 (this one), ranks 1 and 2 on daemon 1.
RankPlacement OnTwoDaemons() {
  RankPlacement placement;
  placement.Place(v1::ROLE_DESTINATION, 0, 0);
  placement.Place(v1::ROLE_DESTINATION, 1, 1);
  placement.Place(v1::ROLE_DESTINATION, 2, 1);
  return placement;
}

TEST(PeerDestinationsTest, MapsThePeersRanksOnceAndWritesIntoTheirSegments) {
  testing::BackedLayouts backed;
  const v1::LayoutSpec shared = ThreeRanks(&backed);
  PeerDestinations peers;
  ASSERT_TRUE(peers.Update(shared, OnTwoDaemons(), /*self=*/0).ok());
  EXPECT_EQ(peers.ranks(), (std::set<int64_t>{0, 1, 2}));
  EXPECT_EQ(peers.mappings(), 2);  // this daemon's own rank is not mapped here
  EXPECT_FALSE(
      peers.buffers()->LocateForWrite(v1::ROLE_DESTINATION, 0, 0, "w", {0, 0}, {1, 8}).ok());

  // A write through the map is in the rank's segment, as a second mapping of it sees.
  absl::StatusOr<StridedRef> row =
      peers.buffers()->LocateForWrite(v1::ROLE_DESTINATION, 2, 0, "w", {3, 0}, {1, 8});
  ASSERT_TRUE(row.ok()) << row.status();
  const float value = 7.5f;
  std::memcpy(row->base, &value, sizeof(value));
  BufferMap seen(testing::TensorsOf(shared));
  ASSERT_TRUE(seen.AddRank(v1::ROLE_DESTINATION, shared.ranks(2)).ok());
  absl::StatusOr<ConstStridedRef> read =
      std::as_const(seen).Locate(v1::ROLE_DESTINATION, 2, 0, "w", {3, 0}, {1, 8});
  ASSERT_TRUE(read.ok());
  float held = 0;
  std::memcpy(&held, read->base, sizeof(held));
  EXPECT_EQ(held, value);

  // The same list again (a warm epoch) maps nothing.
  ASSERT_TRUE(peers.Update(shared, OnTwoDaemons(), 0).ok());
  EXPECT_EQ(peers.mappings(), 2);
}

TEST(PeerDestinationsTest, ARankRegisteredAgainIsMappedAgainAndOneNoLongerListedIsLetGo) {
  testing::BackedLayouts backed;
  const v1::LayoutSpec first = ThreeRanks(&backed);
  PeerDestinations peers;
  ASSERT_TRUE(peers.Update(first, OnTwoDaemons(), 0).ok());
  ASSERT_EQ(peers.mappings(), 2);
  // Rank 2 registered again (new segments); rank 1 left.
  const v1::LayoutSpec again = ThreeRanks(&backed);
  v1::LayoutSpec next;
  *next.mutable_tensors() = first.tensors();
  *next.add_ranks() = first.ranks(0);
  *next.add_ranks() = again.ranks(2);
  ASSERT_TRUE(peers.Update(next, OnTwoDaemons(), 0).ok());
  EXPECT_EQ(peers.mappings(), 3);
  EXPECT_EQ(peers.ranks(), (std::set<int64_t>{0, 2}));
  EXPECT_FALSE(
      peers.buffers()->LocateForWrite(v1::ROLE_DESTINATION, 1, 0, "w", {1, 0}, {1, 8}).ok());
  absl::StatusOr<StridedRef> row =
      peers.buffers()->LocateForWrite(v1::ROLE_DESTINATION, 2, 0, "w", {2, 0}, {1, 8});
  ASSERT_TRUE(row.ok()) << row.status();
  // The write lands in the new segment, not the old one.
  const float value = -3.0f;
  std::memcpy(row->base, &value, sizeof(value));
  BufferMap seen(testing::TensorsOf(again));
  ASSERT_TRUE(seen.AddRank(v1::ROLE_DESTINATION, again.ranks(2)).ok());
  float held = 0;
  std::memcpy(&held,
              std::as_const(seen).Locate(v1::ROLE_DESTINATION, 2, 0, "w", {2, 0}, {1, 8})->base,
              sizeof(held));
  EXPECT_EQ(held, value);
}

TEST(PeerDestinationsTest, ARankRegisteredAgainUnderTheSameSegmentNamesIsMappedAgain) {
  testing::BackedLayouts backed;
  v1::LayoutSpec shared = ThreeRanks(&backed);
  // Rank 1's buffer is a segment this test replaces: a rank that registers again may
  // create a new segment under its old name, and the layout does not change.
  const std::string name = absl::StrCat("/refit-test-peer-again-", getpid());
  const int64_t bytes = shared.ranks(1).buffers(0).bytes();
  shared.mutable_ranks(1)->mutable_buffers(0)->set_shm_name(name);
  auto first = SharedMemorySegment::Create(name, bytes);
  ASSERT_TRUE(first.ok()) << first.status();
  PeerDestinations peers;
  ASSERT_TRUE(peers.Update(shared, OnTwoDaemons(), 0).ok());
  ASSERT_EQ(peers.mappings(), 2);
  first->reset();  // removes the name; the old memory lives on in the mapping
  auto second = SharedMemorySegment::Create(name, bytes);
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_TRUE(peers.Update(shared, OnTwoDaemons(), 0).ok());
  EXPECT_EQ(peers.mappings(), 3) << "rank 1 is mapped again, rank 2 is not";
  absl::StatusOr<StridedRef> row =
      peers.buffers()->LocateForWrite(v1::ROLE_DESTINATION, 1, 0, "w", {1, 0}, {1, 8});
  ASSERT_TRUE(row.ok()) << row.status();
  const float value = 7.5f;
  std::memcpy(row->base, &value, sizeof(value));
  BufferMap seen(testing::TensorsOf(shared));
  ASSERT_TRUE(seen.AddRank(v1::ROLE_DESTINATION, shared.ranks(1)).ok());
  float held = 0;
  std::memcpy(&held,
              std::as_const(seen).Locate(v1::ROLE_DESTINATION, 1, 0, "w", {1, 0}, {1, 8})->base,
              sizeof(held));
  EXPECT_EQ(held, value) << "the write lands in the segment the name leads to now";
}

TEST(PeerDestinationsTest, PeersRanksOfAChangedModelAreMappedWithTheirNewShapes) {
  testing::BackedLayouts backed;
  PeerDestinations peers;
  ASSERT_TRUE(peers.Update(ThreeRanks(&backed), OnTwoDaemons(), 0).ok());
  ASSERT_EQ(peers.mappings(), 2);
  // Every rank registered again for a model whose "w" has eight rows: both peers' ranks
  // are mapped anew (the old shape forgotten first), in this epoch and the next.
  const v1::LayoutSpec grown = ThreeRanks(&backed, /*rows=*/8);
  absl::Status updated = peers.Update(grown, OnTwoDaemons(), 0);
  ASSERT_TRUE(updated.ok()) << updated;
  EXPECT_EQ(peers.mappings(), 4);
  EXPECT_EQ(peers.buffers()->tensors().at("w").shape, (Dims{8, 8}));
  ASSERT_TRUE(peers.Update(grown, OnTwoDaemons(), 0).ok());
  EXPECT_EQ(peers.mappings(), 4);
}

TEST(PeerDestinationsTest, RanksPreparedAheadAreNotMappedAgainByTheEpoch) {
  testing::BackedLayouts backed;
  const v1::LayoutSpec shared = ThreeRanks(&backed);
  v1::LayoutSpec others;  // the coordinator's list for daemon 0: ranks 1 and 2
  *others.mutable_tensors() = shared.tensors();
  *others.add_ranks() = shared.ranks(1);
  *others.add_ranks() = shared.ranks(2);
  PeerDestinations peers;
  ASSERT_TRUE(peers.Prepare(others).ok());
  EXPECT_EQ(peers.mappings(), 2);
  EXPECT_TRUE(peers.ranks().empty()) << "only a slice says what goes straight";
  ASSERT_TRUE(peers.Update(shared, OnTwoDaemons(), 0).ok());
  EXPECT_EQ(peers.mappings(), 2);
  EXPECT_EQ(peers.ranks(), (std::set<int64_t>{0, 1, 2}));
  ASSERT_TRUE(peers.Prepare(others).ok());
  EXPECT_EQ(peers.mappings(), 2);
}

TEST(PeerDestinationsTest, ASegmentThatCannotBeMappedNamesTheRankAndNothingGoesStraight) {
  testing::BackedLayouts backed;
  v1::LayoutSpec shared = ThreeRanks(&backed);
  shared.mutable_ranks(1)->mutable_buffers(0)->set_shm_name("/refit-test-no-such-segment");
  PeerDestinations peers;
  absl::Status updated = peers.Update(shared, OnTwoDaemons(), 0);
  ASSERT_FALSE(updated.ok());
  EXPECT_NE(updated.message().find("destination rank 1"), std::string::npos) << updated;
  EXPECT_NE(updated.message().find("/refit-test-no-such-segment"), std::string::npos) << updated;
  EXPECT_TRUE(peers.ranks().empty());
}

}  // namespace
}  // namespace refit::transport

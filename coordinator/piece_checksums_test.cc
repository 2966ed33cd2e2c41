// Piece checksums over real planner output and real shared memory: after random reshards
// run by the local executor, both ends of every view-to-view transfer hash alike; one
// flipped byte in a destination view is caught and the piece named, even where no other
// view holds the same box (which view checksums cannot see).
#include "coordinator/piece_checksums.h"

#include <random>
#include <set>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "planner/layout.h"
#include "planner/plan_proto.h"
#include "planner/planner.h"
#include "planner/testing/layout_builder.h"
#include "planner/testing/relay_buffer_case.h"
#include "planner/topology.h"
#include "transport/local_executor.h"
#include "transport/piece_hashing.h"
#include "transport/testing/backed_layouts.h"

namespace refit::daemon {
namespace {

using transport::ChecksumPieces;

struct Executed {
  transport::testing::BackedLayouts backed;
  v1::LayoutSpec sources, destinations;
  std::unique_ptr<transport::BufferMap> buffers;
  v1::Plan plan;
  transport::RankPlacement placement;  // everything on daemon 0
};

void Execute(const refit::testing::LayoutPair& pair, const char* strategy, Executed* out,
             const v1::Topology& topology = planner::DgxH100Topology(),
             int64_t staging_budget_bytes = planner::PlanOptions().staging_budget_bytes) {
  out->sources = out->backed.Back(pair.sources, "source");
  out->destinations = out->backed.Back(pair.destinations, "destination");
  out->buffers =
      std::make_unique<transport::BufferMap>(transport::testing::TensorsOf(out->sources));
  for (const v1::RankLayout& r : out->sources.ranks()) {
    ASSERT_TRUE(out->buffers->AddRank(v1::ROLE_SOURCE, r).ok());
    transport::testing::FillViews(out->buffers.get(), v1::ROLE_SOURCE, r);
  }
  for (const v1::RankLayout& r : out->destinations.ranks()) {
    ASSERT_TRUE(out->buffers->AddRank(v1::ROLE_DESTINATION, r).ok());
  }
  planner::PlanOptions options;
  options.strategy = strategy;
  options.staging_budget_bytes = staging_budget_bytes;
  const planner::Layout src = *planner::CompileLayout(pair.sources, "source");
  const planner::Layout dst = *planner::CompileLayout(pair.destinations, "destination");
  auto plan = planner::BuildPlan(src, dst, topology, options);
  ASSERT_TRUE(plan.ok()) << plan.status();
  out->plan = planner::PlanToProto(**plan, src, dst);
  ASSERT_TRUE(transport::ExecuteLocally(out->plan, out->buffers.get()).ok());
  out->placement.SetDefault(0);
}

// Rows of an [8, 6] tensor on two trainers, columns on two inference ranks: no box is
// held on both sides, so there are four pieces.
void ExecuteRowsToColumns(Executed* run) {
  refit::testing::LayoutBuilder src, dst;
  src.Tensor("w", {8, 6}).Chunked("w", 0, {0, 1}).Rank(0, "a", 0).Rank(1, "a", 1);
  dst.Tensor("w", {8, 6}).Chunked("w", 1, {0, 1}).Rank(0, "b", 0).Rank(1, "b", 1);
  Execute({src.spec(), dst.spec(), "rows to columns"}, planner::kStrategyReshard, run);
}

TEST(PieceChecksumsTest, BothEndsAgreeAfterRandomReshards) {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 40; ++trial) {
    const refit::testing::LayoutPair pair = refit::testing::RandomLayoutPair(rng, {});
    SCOPED_TRACE(::testing::Message() << "trial " << trial << ": " << pair.description);
    Executed run;
    ASSERT_NO_FATAL_FAILURE(Execute(pair, planner::kStrategyReshard, &run));
    auto pieces = ChecksumPieces(run.plan, run.placement, 0, *run.buffers);
    ASSERT_TRUE(pieces.ok()) << pieces.status();
    // Forwards of a box a destination view was given whole are compared with that write.
    int64_t transfers = 0, forwards_of_written_boxes = 0;
    std::set<std::string> written;  // "rank view tensor offset extent" of destination views
    auto box = [](const v1::Endpoint& view, const v1::Transfer& t) {
      return absl::StrCat(view.rank(), " ", view.view(), " ", t.tensor(), " ",
                          absl::StrJoin(t.offset(), ","), " ", absl::StrJoin(t.extent(), ","));
    };
    for (const v1::Batch& batch : run.plan.batches()) {
      for (const v1::Transfer& t : batch.transfers()) {
        ++transfers;
        if (t.src().kind() == v1::ENDPOINT_DESTINATION_VIEW) {
          forwards_of_written_boxes += written.count(box(t.src(), t));
        }
        written.insert(box(t.dst(), t));
      }
    }
    EXPECT_EQ(static_cast<int64_t>(pieces->size()), 2 * transfers);  // reshard: view to view
    absl::StatusOr<int64_t> compared = ComparePieceChecksums(run.plan, *pieces);
    ASSERT_TRUE(compared.ok()) << compared.status();
    EXPECT_EQ(*compared, transfers + forwards_of_written_boxes);
  }
}

TEST(PieceChecksumsTest, AFlippedDestinationByteNamesThePiece) {
  Executed run;
  ASSERT_NO_FATAL_FAILURE(ExecuteRowsToColumns(&run));
  // Element [5, 4] lands in destination rank 1's view at [5, 1].
  absl::StatusOr<transport::StridedRef> memory =
      run.buffers->LocateForWrite(v1::ROLE_DESTINATION, 1, 0, "w", {5, 4}, {1, 1});
  ASSERT_TRUE(memory.ok()) << memory.status();
  memory->base[0] ^= 0x40;
  auto pieces = ChecksumPieces(run.plan, run.placement, 0, *run.buffers);
  ASSERT_TRUE(pieces.ok()) << pieces.status();
  absl::StatusOr<int64_t> compared = ComparePieceChecksums(run.plan, *pieces);
  ASSERT_EQ(compared.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(compared.status().message(),
                                "checksum mismatch on w [4,3] + [4,3]: destination rank 1 view 0"))
      << compared.status();
  EXPECT_TRUE(absl::StrContains(compared.status().message(), "source rank 1 view 0"))
      << compared.status();
}

// Ends the executor hashed on the way are reported as it hashed them, not hashed again:
// equal hashes give the same report, and one that differs (what a byte that changed on its
// way would give) is the mismatch named.
TEST(PieceChecksumsTest, EndsHashedOnTheWayAreReportedAsTaken) {
  Executed run;
  ASSERT_NO_FATAL_FAILURE(ExecuteRowsToColumns(&run));
  auto after = ChecksumPieces(run.plan, run.placement, 0, *run.buffers);
  ASSERT_TRUE(after.ok()) << after.status();
  transport::PieceHashes on_the_way;
  for (const v1::PieceChecksum& p : *after) {
    (p.destination() ? on_the_way.at_destination : on_the_way.at_source)[p.sequence()] = p.xxh64();
  }
  auto taken = ChecksumPieces(run.plan, run.placement, 0, *run.buffers, &on_the_way);
  ASSERT_TRUE(taken.ok()) << taken.status();
  ASSERT_EQ(taken->size(), after->size());
  for (size_t i = 0; i < after->size(); ++i) {
    EXPECT_EQ((*taken)[i].SerializeAsString(), (*after)[i].SerializeAsString()) << i;
  }
  const int64_t changed = on_the_way.at_destination.begin()->first;
  on_the_way.at_destination[changed] ^= 1;
  taken = ChecksumPieces(run.plan, run.placement, 0, *run.buffers, &on_the_way);
  ASSERT_TRUE(taken.ok()) << taken.status();
  absl::StatusOr<int64_t> compared = ComparePieceChecksums(run.plan, *taken);
  ASSERT_EQ(compared.status().code(), absl::StatusCode::kDataLoss);
  const v1::Transfer* named = nullptr;
  for (const v1::Batch& batch : run.plan.batches()) {
    for (const v1::Transfer& t : batch.transfers()) {
      if (t.sequence() == changed) named = &t;
    }
  }
  ASSERT_NE(named, nullptr);
  EXPECT_TRUE(absl::StrContains(compared.status().message(),
                                absl::StrCat("destination rank ", named->dst().rank())))
      << compared.status();
}

// ExecuteRowsToColumns's ranks: sources on daemon 0, destinations on daemon 1.
transport::RankPlacement TrainerAndInferenceDaemons() {
  transport::RankPlacement placement;
  for (int64_t r : {0, 1}) {
    placement.Place(v1::ROLE_SOURCE, r, 0);
    placement.Place(v1::ROLE_DESTINATION, r, 1);
  }
  return placement;
}

TEST(PieceChecksumsTest, OnlyTheDaemonsOwnEndsAreHashed) {
  Executed run;
  ASSERT_NO_FATAL_FAILURE(ExecuteRowsToColumns(&run));
  const transport::RankPlacement placement = TrainerAndInferenceDaemons();
  auto trainer = ChecksumPieces(run.plan, placement, 0, *run.buffers);
  auto inference = ChecksumPieces(run.plan, placement, 1, *run.buffers);
  ASSERT_TRUE(trainer.ok() && inference.ok());
  for (const v1::PieceChecksum& p : *trainer) EXPECT_FALSE(p.destination());
  for (const v1::PieceChecksum& p : *inference) EXPECT_TRUE(p.destination());
  EXPECT_EQ(trainer->size(), 4u);
  std::vector<v1::PieceChecksum> all = *trainer;
  all.insert(all.end(), inference->begin(), inference->end());
  EXPECT_EQ(*ComparePieceChecksums(run.plan, all), 4);
  // Only one end reported: nothing to compare, nothing claimed.
  EXPECT_EQ(*ComparePieceChecksums(run.plan, *trainer), 0);
}

// A piece the trainer's daemon wrote straight into a same-host inference rank: the writer
// reports both ends (hashed on the way), the inference daemon neither hashes nor reports
// that destination end, and the two lists still pair every piece.
TEST(PieceChecksumsTest, PiecesWrittenStraightAreReportedByTheirWriter) {
  Executed run;
  ASSERT_NO_FATAL_FAILURE(ExecuteRowsToColumns(&run));
  const transport::RankPlacement placement = TrainerAndInferenceDaemons();
  auto honest = ChecksumPieces(run.plan, placement, 1, *run.buffers);
  ASSERT_TRUE(honest.ok());
  transport::PieceHashes writer, written;
  for (const v1::PieceChecksum& p : *honest) {
    writer.at_destination[p.sequence()] = p.xxh64();
    written.written_by_peers.insert(p.sequence());
  }
  auto trainer = ChecksumPieces(run.plan, placement, 0, *run.buffers, &writer);
  auto inference = ChecksumPieces(run.plan, placement, 1, *run.buffers, &written);
  ASSERT_TRUE(trainer.ok() && inference.ok());
  EXPECT_EQ(trainer->size(), 8u) << "both ends of the four pieces";
  EXPECT_TRUE(inference->empty());
  EXPECT_EQ(*ComparePieceChecksums(run.plan, *trainer), 4);
}

// A piece that goes through a relay buffer is checked end to end (source view against
// destination view), though neither of its two transfers is view to view.
TEST(PieceChecksumsTest, PiecesThroughRelayBuffersAreComparedEndToEnd) {
  const refit::testing::RelayBufferCase relay_case = refit::testing::MakeRelayBufferCase();
  Executed run;
  ASSERT_NO_FATAL_FAILURE(Execute(
      {relay_case.sources.spec(), relay_case.destinations.spec(), "relay buffer case"},
      planner::kStrategyReshard, &run, relay_case.topology, relay_case.staging_budget_bytes));
  int64_t direct = 0, through_buffers = 0;
  const v1::Transfer* relayed = nullptr;
  for (const v1::Batch& batch : run.plan.batches()) {
    for (const v1::Transfer& t : batch.transfers()) {
      if (t.src().kind() == v1::ENDPOINT_RELAY_BUFFER) {
        ++through_buffers;
        relayed = &t;
      } else if (t.dst().kind() != v1::ENDPOINT_RELAY_BUFFER) {
        ++direct;
      }
    }
  }
  ASSERT_GT(through_buffers, 0);
  auto pieces = ChecksumPieces(run.plan, run.placement, 0, *run.buffers);
  ASSERT_TRUE(pieces.ok()) << pieces.status();
  EXPECT_EQ(*ComparePieceChecksums(run.plan, *pieces), direct + through_buffers);
  // One flipped byte of a piece that came through a buffer is caught and named.
  absl::StatusOr<transport::StridedRef> memory =
      run.buffers->LocateForWrite(v1::ROLE_DESTINATION, 0, relayed->dst().view(), "w",
                                  {relayed->offset().begin(), relayed->offset().end()}, {1, 1});
  ASSERT_TRUE(memory.ok()) << memory.status();
  memory->base[0] ^= 0x40;
  pieces = ChecksumPieces(run.plan, run.placement, 0, *run.buffers);
  ASSERT_TRUE(pieces.ok()) << pieces.status();
  absl::StatusOr<int64_t> compared = ComparePieceChecksums(run.plan, *pieces);
  ASSERT_EQ(compared.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(compared.status().message(),
                                absl::StrCat("where relay buffer ", relayed->src().relay_buffer())))
      << compared.status();
}

// A replica forwarded from a destination view is compared with what was written there: a
// forward that read the box before the write landed (its own two ends agree, as one copy
// hashes both) is caught and named.
TEST(PieceChecksumsTest, AForwardedReplicaMustReadWhatWasWrittenThere) {
  v1::Plan plan;
  auto add_transfer = [&](v1::EndpointKind from_kind, int64_t from_rank, int64_t to_rank,
                          int64_t sequence) {
    v1::Transfer* t = plan.add_batches()->add_transfers();
    t->mutable_src()->set_kind(from_kind);
    t->mutable_src()->set_rank(from_rank);
    t->mutable_dst()->set_kind(v1::ENDPOINT_DESTINATION_VIEW);
    t->mutable_dst()->set_rank(to_rank);
    t->set_tensor("w");
    for (int64_t o : {4, 0}) t->add_offset(o);
    for (int64_t e : {4, 6}) t->add_extent(e);
    t->set_sequence(sequence);
  };
  add_transfer(v1::ENDPOINT_SOURCE_VIEW, 0, 0, 7);       // trainer 0 -> replica 0
  add_transfer(v1::ENDPOINT_DESTINATION_VIEW, 0, 1, 8);  // replica 0 -> replica 1
  auto pieces = [](uint64_t written, uint64_t forwarded) {
    std::vector<v1::PieceChecksum> out;
    for (auto [sequence, destination, hash] : {std::tuple{7, false, written},
                                               {7, true, written},
                                               {8, false, forwarded},
                                               {8, true, forwarded}}) {
      v1::PieceChecksum& p = out.emplace_back();
      p.set_sequence(sequence);
      p.set_destination(destination);
      p.set_xxh64(hash);
    }
    return out;
  };
  // Each transfer's own ends, and the forward's read against the write.
  EXPECT_EQ(*ComparePieceChecksums(plan, pieces(0x1234, 0x1234)), 3);
  absl::StatusOr<int64_t> stale = ComparePieceChecksums(plan, pieces(0x1234, 0x5678));
  ASSERT_EQ(stale.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(stale.status().message(),
                                "destination rank 0 view 0 was read as 0000000000005678 to go on "
                                "to destination rank 1 view 0, but 0000000000001234 had been "
                                "written there (transfer 7)"))
      << stale.status();
  // A forward of another box of the view than the one written is not paired.
  plan.mutable_batches(1)->mutable_transfers(0)->set_extent(0, 2);
  EXPECT_EQ(*ComparePieceChecksums(plan, pieces(0x1234, 0x5678)), 2);
}

}  // namespace
}  // namespace refit::daemon

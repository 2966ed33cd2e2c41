// The local backend runs real planner output between real shared-memory segments: for
// random layouts (fused and strided buffers, replication, uneven splits) and both
// strategies, every destination element ends up holding its source value.
#include "transport/local_executor.h"

#include <unistd.h>

#include <random>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "planner/layout.h"
#include "planner/plan_proto.h"
#include "planner/planner.h"
#include "planner/testing/layout_builder.h"
#include "planner/topology.h"
#include "transport/testing/backed_layouts.h"

namespace refit::transport {
namespace {

TEST(LocalExecutorTest, RandomLayoutsArriveByteForByte) {
  std::mt19937_64 rng(99);
  for (int trial = 0; trial < 120; ++trial) {
    const refit::testing::LayoutPair pair = refit::testing::RandomLayoutPair(rng, {});
    SCOPED_TRACE(::testing::Message() << "trial " << trial << ": " << pair.description);
    for (const char* strategy : {planner::kStrategyReshard, planner::kStrategyGatherBroadcast}) {
      testing::BackedLayouts backed;
      const v1::LayoutSpec sources = backed.Back(pair.sources, "source");
      const v1::LayoutSpec destinations = backed.Back(pair.destinations, "destination");
      BufferMap map(testing::TensorsOf(sources));
      for (const v1::RankLayout& r : sources.ranks()) {
        ASSERT_TRUE(map.AddRank(v1::ROLE_SOURCE, r).ok());
        testing::FillViews(&map, v1::ROLE_SOURCE, r);
      }
      for (const v1::RankLayout& r : destinations.ranks()) {
        ASSERT_TRUE(map.AddRank(v1::ROLE_DESTINATION, r).ok());
      }
      planner::PlanOptions options;
      options.strategy = strategy;
      const planner::Layout src = *planner::CompileLayout(pair.sources, "source");
      const planner::Layout dst = *planner::CompileLayout(pair.destinations, "destination");
      auto plan = planner::BuildPlan(src, dst, planner::DgxH100Topology(), options);
      ASSERT_TRUE(plan.ok()) << plan.status();
      absl::StatusOr<ExecutionStats> stats =
          ExecuteLocally(planner::PlanToProto(**plan, src, dst), &map);
      ASSERT_TRUE(stats.ok()) << stats.status();
      EXPECT_EQ(stats->bytes, (*plan)->stats.total_bytes);
      for (const v1::RankLayout& r : destinations.ranks()) {
        ASSERT_EQ(testing::WrongBytes(map, v1::ROLE_DESTINATION, r), 0)
            << strategy << ": destination rank " << r.rank();
      }
    }
  }
}

TEST(BufferMapTest, RegistrationErrorsNameRankViewAndBuffer) {
  const std::string shm = testing::UniqueShmName("refit-map");
  auto segment = SharedMemorySegment::Create(shm, 64);
  ASSERT_TRUE(segment.ok());
  BufferMap map(TensorTable{{"w", TensorShape{4, {8, 4}}}});
  v1::RankLayout rank;
  rank.set_rank(3);
  v1::BufferSpec* buffer = rank.add_buffers();
  buffer->set_name("weights");
  buffer->set_bytes(64);
  buffer->set_shm_name(shm);
  v1::ShardView* view = rank.add_views();
  view->set_tensor("w");
  view->set_buffer("weights");
  for (int64_t x : {0, 0}) view->add_offset(x);
  for (int64_t x : {8, 4}) view->add_extent(x);  // 128 bytes: does not fit 64
  absl::Status status = map.AddRank(v1::ROLE_DESTINATION, rank);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "destination rank 3: view 0 (w): ends at byte 128, outside buffer \"weights\" of 64 "
            "bytes");

  view->set_extent(0, 4);  // 64 bytes: fits
  ASSERT_TRUE(map.AddRank(v1::ROLE_DESTINATION, rank).ok());
  EXPECT_EQ(map.AddRank(v1::ROLE_DESTINATION, rank).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(map.Locate(v1::ROLE_DESTINATION, 3, 0, "w", {2, 0}, {4, 4}).status().code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(map.Locate(v1::ROLE_SOURCE, 3, 0, "w", {0, 0}, {1, 1}).status().code(),
            absl::StatusCode::kNotFound);

  v1::RankLayout missing = rank;
  missing.set_rank(4);
  missing.mutable_buffers(0)->set_shm_name("/refit-no-such-segment");
  status = map.AddRank(v1::ROLE_SOURCE, missing);
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(status.message().find("source rank 4: buffer \"weights\""), std::string::npos);
}

TEST(LocalExecutorTest, APlanThatWritesIntoASourceViewIsRefusedAndTheViewKeepsItsBytes) {
  refit::testing::LayoutBuilder builder;
  builder.Tensor("w", {4, 8}).Rank(0, "node", 0).View(0, "w", {0, 0}, {4, 8});
  testing::BackedLayouts backed;
  const v1::LayoutSpec sources = backed.Back(builder.spec(), "source");
  const v1::LayoutSpec destinations = backed.Back(builder.spec(), "destination");
  BufferMap map(testing::TensorsOf(sources));
  ASSERT_TRUE(map.AddRank(v1::ROLE_SOURCE, sources.ranks(0)).ok());
  ASSERT_TRUE(map.AddRank(v1::ROLE_DESTINATION, destinations.ranks(0)).ok());
  testing::FillViews(&map, v1::ROLE_SOURCE, sources.ranks(0));
  // A destination view copied back over the trainer's weights.
  v1::Plan plan;
  v1::Transfer* t = plan.add_batches()->add_transfers();
  t->set_tensor("w");
  t->mutable_src()->set_kind(v1::ENDPOINT_DESTINATION_VIEW);
  t->mutable_dst()->set_kind(v1::ENDPOINT_SOURCE_VIEW);
  for (int64_t e : {4, 8}) {
    t->add_offset(0);
    t->add_extent(e);
  }
  t->set_bytes(4 * 8 * 4);
  const absl::StatusOr<ExecutionStats> ran = ExecuteLocally(plan, &map);
  EXPECT_EQ(ran.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(ran.status().message().find("would write into source rank 0's view 0"),
            std::string::npos)
      << ran.status();
  EXPECT_EQ(testing::WrongBytes(map, v1::ROLE_SOURCE, sources.ranks(0)), 0);
}

}  // namespace
}  // namespace refit::transport

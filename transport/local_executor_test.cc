// The local backend runs real planner output between real shared-memory segments: for
// random layouts (fused and strided buffers, replication, uneven splits) and both
// strategies, every destination element ends up holding its source value.
#include "transport/local_executor.h"

#include <unistd.h>

#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "planner/dtype.h"
#include "planner/layout.h"
#include "planner/plan_proto.h"
#include "planner/planner.h"
#include "planner/testing/layout_builder.h"
#include "planner/topology.h"

namespace refit::transport {
namespace {

// Shared-memory segments standing in for the ranks' weight buffers.
class Ranks {
 public:
  // Gives every buffer of `spec` a segment (views without a buffer get their own) and
  // returns the registration form of the layout.
  v1::LayoutSpec Back(const v1::LayoutSpec& spec, const std::string& side) {
    absl::StatusOr<planner::Layout> layout = planner::CompileLayout(spec, side);
    EXPECT_TRUE(layout.ok()) << layout.status();
    v1::LayoutSpec out = spec;
    for (int r = 0; r < out.ranks_size(); ++r) {
      v1::RankLayout* rank = out.mutable_ranks(r);
      rank->clear_buffers();
      for (int v = 0; v < rank->views_size(); ++v) {
        if (rank->views(v).buffer().empty()) {
          rank->mutable_views(v)->set_buffer(absl::StrCat("#view", v));
        }
      }
      for (const planner::BufferInfo& buffer : layout->ranks[r].buffers) {
        const std::string shm = absl::StrCat("/refit-exec-", getpid(), "-", segments_.size());
        auto segment = SharedMemorySegment::Create(shm, buffer.bytes);
        EXPECT_TRUE(segment.ok()) << segment.status();
        std::memset((*segment)->data(), 0xA5, buffer.bytes);
        segments_.push_back(std::move(*segment));
        v1::BufferSpec* spec_buffer = rank->add_buffers();
        spec_buffer->set_name(buffer.name);
        spec_buffer->set_bytes(buffer.bytes);
        spec_buffer->set_shm_name(shm);
      }
    }
    return out;
  }

 private:
  std::vector<std::unique_ptr<SharedMemorySegment>> segments_;
};

uint8_t ValueByte(const std::string& tensor, int64_t linear, int byte) {
  uint64_t h = std::hash<std::string>()(tensor) ^ (linear * 0x9E3779B97F4A7C15ULL + byte);
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ULL;
  return static_cast<uint8_t>((h >> 32) == 0xA5 ? 0x5A : (h >> 32));
}

// Visits every element of a view: its global linear index and its memory.
template <typename Fn>
void ForEachElement(const BufferMap& map, v1::Role role, const v1::RankLayout& rank, int view,
                    Fn fn) {
  const v1::ShardView& v = rank.views(view);
  const Dims offset(v.offset().begin(), v.offset().end());
  const Dims extent(v.extent().begin(), v.extent().end());
  const TensorShape& shape = map.tensors().at(v.tensor());
  absl::StatusOr<StridedRef> ref = map.Locate(role, rank.rank(), view, v.tensor(), offset, extent);
  ASSERT_TRUE(ref.ok()) << ref.status();
  Dims index(extent.size(), 0);
  while (true) {
    int64_t linear = 0, element = 0;
    for (size_t d = 0; d < extent.size(); ++d) {
      linear = linear * shape.shape[d] + offset[d] + index[d];
      element += index[d] * ref->strides[d];
    }
    fn(linear, ref->base + element * shape.element_bytes, shape.element_bytes);
    size_t d = extent.size();
    while (d > 0 && ++index[d - 1] == extent[d - 1]) index[--d] = 0;
    if (d == 0) return;
  }
}

TEST(LocalExecutorTest, RandomLayoutsArriveByteForByte) {
  std::mt19937_64 rng(99);
  for (int trial = 0; trial < 120; ++trial) {
    const refit::testing::LayoutPair pair = refit::testing::RandomLayoutPair(rng, {});
    SCOPED_TRACE(::testing::Message() << "trial " << trial << ": " << pair.description);
    for (const char* strategy : {planner::kStrategyReshard, planner::kStrategyGatherBroadcast}) {
      Ranks ranks;
      const v1::LayoutSpec sources = ranks.Back(pair.sources, "source");
      const v1::LayoutSpec destinations = ranks.Back(pair.destinations, "destination");
      TensorTable tensors;
      for (const v1::TensorSpec& t : sources.tensors()) {
        tensors[t.name()] =
            TensorShape{*planner::DtypeBytes(t.dtype()), Dims(t.shape().begin(), t.shape().end())};
      }
      BufferMap map(tensors);
      for (const v1::RankLayout& r : sources.ranks())
        ASSERT_TRUE(map.AddRank(v1::ROLE_SOURCE, r).ok());
      for (const v1::RankLayout& r : destinations.ranks()) {
        ASSERT_TRUE(map.AddRank(v1::ROLE_DESTINATION, r).ok());
      }
      for (const v1::RankLayout& r : sources.ranks()) {
        for (int v = 0; v < r.views_size(); ++v) {
          const std::string& tensor = r.views(v).tensor();
          ForEachElement(map, v1::ROLE_SOURCE, r, v, [&](int64_t linear, uint8_t* at, int eb) {
            for (int b = 0; b < eb; ++b) at[b] = ValueByte(tensor, linear, b);
          });
        }
      }
      planner::PlanOptions options;
      options.strategy = strategy;
      const planner::Layout src = *planner::CompileLayout(pair.sources, "source");
      const planner::Layout dst = *planner::CompileLayout(pair.destinations, "destination");
      auto plan = planner::BuildPlan(src, dst, planner::DgxH100Topology(), options);
      ASSERT_TRUE(plan.ok()) << plan.status();
      absl::StatusOr<ExecutionStats> stats =
          ExecuteLocally(planner::PlanToProto(**plan, src, dst), map);
      ASSERT_TRUE(stats.ok()) << stats.status();
      EXPECT_EQ(stats->bytes, (*plan)->stats.total_bytes);
      for (const v1::RankLayout& r : destinations.ranks()) {
        for (int v = 0; v < r.views_size(); ++v) {
          const std::string& tensor = r.views(v).tensor();
          int64_t wrong = 0;
          ForEachElement(map, v1::ROLE_DESTINATION, r, v, [&](int64_t linear, uint8_t* at, int eb) {
            for (int b = 0; b < eb; ++b) wrong += at[b] != ValueByte(tensor, linear, b);
          });
          ASSERT_EQ(wrong, 0) << strategy << ": " << tensor << " on destination rank " << r.rank();
        }
      }
    }
  }
}

TEST(BufferMapTest, RegistrationErrorsNameRankViewAndBuffer) {
  const std::string shm = absl::StrCat("/refit-map-", getpid());
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

}  // namespace
}  // namespace refit::transport

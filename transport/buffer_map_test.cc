// Staged destination ranks in the buffer map: the views point into shadows, the buffers
// change only at CommitStaged, and only for ranks the epoch wrote.
#include "transport/buffer_map.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/testing/layout_builder.h"
#include "transport/testing/backed_layouts.h"

namespace refit::transport {
namespace {

class StagedBufferMapTest : public ::testing::Test {
 protected:
  void SetUp() override {
    destinations_ = backed_.Back(refit::testing::RowsToColumnsPair().destinations, "destination");
    map_ = BufferMap(testing::TensorsOf(destinations_));
  }

  // The rank's buffers, read through their own mappings.
  std::string Buffers(const v1::RankLayout& rank) {
    std::string bytes;
    for (const v1::BufferSpec& buffer : rank.buffers()) {
      auto segment = SharedMemorySegment::Open(buffer.shm_name(), buffer.bytes());
      EXPECT_TRUE(segment.ok()) << segment.status();
      if (segment.ok()) bytes.append(reinterpret_cast<char*>((*segment)->data()), buffer.bytes());
    }
    return bytes;
  }

  // Wrong bytes of the rank's views in the buffers themselves.
  int64_t WrongInBuffers(v1::RankLayout rank) {
    BufferMap own(testing::TensorsOf(destinations_));
    rank.set_staged(false);
    EXPECT_TRUE(own.AddRank(v1::ROLE_DESTINATION, rank).ok());
    return testing::WrongBytes(own, v1::ROLE_DESTINATION, rank);
  }

  testing::BackedLayouts backed_;
  v1::LayoutSpec destinations_;
  BufferMap map_;
};

TEST_F(StagedBufferMapTest, TheBuffersChangeOnlyAtCommitAndOnlyForRanksTheEpochWrote) {
  v1::RankLayout staged = destinations_.ranks(0);
  staged.set_staged(true);
  ASSERT_TRUE(map_.AddRank(v1::ROLE_DESTINATION, staged).ok());
  EXPECT_TRUE(map_.IsStaged(v1::ROLE_DESTINATION, 0));
  int64_t buffer_bytes = 0;
  for (const v1::BufferSpec& buffer : staged.buffers()) buffer_bytes += buffer.bytes();
  EXPECT_EQ(map_.ShadowBytes(), buffer_bytes);
  const std::string before = Buffers(staged);

  // An epoch writes every view (through the map, as the data plane does) and fails.
  map_.StageEpoch({0, 1});
  testing::FillViews(&map_, v1::ROLE_DESTINATION, staged);
  EXPECT_EQ(testing::WrongBytes(map_, v1::ROLE_DESTINATION, staged), 0);
  EXPECT_EQ(Buffers(staged), before);
  map_.DiscardStaged();
  map_.CommitStaged();  // a commit of nothing: the failed epoch's writes stay out
  EXPECT_EQ(Buffers(staged), before);

  // The next epoch commits: the buffers hold every view's bytes.
  map_.StageEpoch({0, 1});
  testing::FillViews(&map_, v1::ROLE_DESTINATION, staged);
  map_.CommitStaged();
  EXPECT_EQ(WrongInBuffers(staged), 0);

  // A staged rank that joined after the epoch began is not copied at its commit.
  v1::RankLayout late = destinations_.ranks(1);
  late.set_staged(true);
  const std::string late_before = Buffers(late);
  map_.StageEpoch({0, 1});
  ASSERT_TRUE(map_.AddRank(v1::ROLE_DESTINATION, late).ok());
  map_.CommitStaged();
  EXPECT_EQ(Buffers(late), late_before);
}

TEST_F(StagedBufferMapTest, ARankWhoseSegmentWasTruncatedIsReportedTornAndLeftAlone) {
  v1::RankLayout staged = destinations_.ranks(0);
  staged.set_staged(true);
  ASSERT_TRUE(map_.AddRank(v1::ROLE_DESTINATION, staged).ok());
  map_.StageEpoch({0});
  testing::FillViews(&map_, v1::ROLE_DESTINATION, staged);
  // Its owner shrinks the segment before the commit.
  const std::string name = staged.buffers(0).shm_name();
  const int fd = shm_open(name.c_str(), O_RDWR, 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 0), 0);
  close(fd);
  const std::map<int64_t, absl::Status> torn = map_.CommitStaged();
  ASSERT_EQ(torn.size(), 1u);
  EXPECT_EQ(torn.begin()->first, 0);
  EXPECT_NE(torn.begin()->second.message().find("truncated"), std::string::npos)
      << torn.begin()->second;
}

TEST_F(StagedBufferMapTest, OnlyDestinationsCanBeStaged) {
  v1::RankLayout source = destinations_.ranks(0);
  source.set_staged(true);
  const absl::Status refused = map_.AddRank(v1::ROLE_SOURCE, source);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(refused.message(), "source rank 0: only destination ranks can be staged");
}

TEST_F(StagedBufferMapTest, UnstagedRanksAreWrittenInPlace) {
  const v1::RankLayout rank = destinations_.ranks(0);
  ASSERT_TRUE(map_.AddRank(v1::ROLE_DESTINATION, rank).ok());
  EXPECT_FALSE(map_.IsStaged(v1::ROLE_DESTINATION, 0));
  EXPECT_EQ(map_.ShadowBytes(), 0);
  testing::FillViews(&map_, v1::ROLE_DESTINATION, rank);
  EXPECT_EQ(WrongInBuffers(rank), 0);
}

// One rank holding all of a [rows, 8] F32 tensor "w".
v1::LayoutSpec OneRankOf(int64_t rows, testing::BackedLayouts* backed) {
  refit::testing::LayoutBuilder builder;
  builder.Tensor("w", {rows, 8}).Rank(0, "node", 0).View(0, "w", {0, 0}, {rows, 8});
  return backed->Back(builder.spec(), "source");
}

// A const map hands out memory to read only; writable refs need the map itself.
static_assert(std::is_same_v<decltype(std::declval<const BufferMap&>().Locate(v1::ROLE_SOURCE, 0, 0,
                                                                              "", Dims(), Dims())),
                             absl::StatusOr<ConstStridedRef>>);
static_assert(std::is_same_v<decltype(std::declval<BufferMap&>().LocateForWrite(
                                 v1::ROLE_SOURCE, 0, 0, "", Dims(), Dims())),
                             absl::StatusOr<StridedRef>>);
static_assert(!std::is_assignable_v<decltype(*ConstStridedRef().base)&, uint8_t>);

TEST(BufferMapTest, ReadAndWriteRefsPointAtTheSameBox) {
  testing::BackedLayouts backed;
  const v1::LayoutSpec spec = OneRankOf(4, &backed);
  BufferMap map(testing::TensorsOf(spec));
  ASSERT_TRUE(map.AddRank(v1::ROLE_SOURCE, spec.ranks(0)).ok());
  absl::StatusOr<StridedRef> write = map.LocateForWrite(v1::ROLE_SOURCE, 0, 0, "w", {1, 2}, {2, 3});
  absl::StatusOr<ConstStridedRef> read =
      std::as_const(map).Locate(v1::ROLE_SOURCE, 0, 0, "w", {1, 2}, {2, 3});
  ASSERT_TRUE(write.ok() && read.ok());
  EXPECT_EQ(read->base, write->base);
  EXPECT_EQ(read->strides, write->strides);
  // Both say the same when the box leaves the view.
  EXPECT_EQ(map.LocateForWrite(v1::ROLE_SOURCE, 0, 0, "w", {3, 0}, {2, 8}).status().code(),
            absl::StatusCode::kOutOfRange);
}

TEST(BufferMapTest, TensorsAreForgottenWithTheLastRankThatDeclaredThem) {
  testing::BackedLayouts backed;
  BufferMap map;
  const v1::LayoutSpec small = OneRankOf(4, &backed);
  const v1::LayoutSpec large = OneRankOf(16, &backed);
  const TensorTable small_tensors = testing::TensorsOf(small);
  const TensorTable large_tensors = testing::TensorsOf(large);
  ASSERT_TRUE(map.AddRank(v1::ROLE_SOURCE, small.ranks(0), &small_tensors).ok());
  // While a rank declares w as [4, 8], another shape is refused, and the refusal leaves
  // the table as it was.
  v1::RankLayout other = large.ranks(0);
  other.set_rank(1);
  const absl::Status conflict = map.AddRank(v1::ROLE_SOURCE, other, &large_tensors);
  EXPECT_EQ(conflict.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(conflict.message().find("source rank 1: w: declared again"), std::string::npos)
      << conflict;
  EXPECT_EQ(map.tensors().at("w").shape, Dims({4, 8}));
  // Once it leaves, the model may change: w comes back as [16, 8].
  map.RemoveRank(v1::ROLE_SOURCE, 0);
  EXPECT_FALSE(map.tensors().contains("w"));
  ASSERT_TRUE(map.AddRank(v1::ROLE_SOURCE, other, &large_tensors).ok());
  EXPECT_EQ(map.tensors().at("w").shape, Dims({16, 8}));
}

TEST(BufferMapTest, ARefusedRankDeclaresNothing) {
  testing::BackedLayouts backed;
  BufferMap map;
  v1::LayoutSpec spec = OneRankOf(4, &backed);
  spec.mutable_ranks(0)->mutable_buffers(0)->set_shm_name("/refit-no-such-segment-anywhere");
  const TensorTable tensors = testing::TensorsOf(spec);
  EXPECT_FALSE(map.AddRank(v1::ROLE_SOURCE, spec.ranks(0), &tensors).ok());
  EXPECT_TRUE(map.tensors().empty());
}

TEST_F(StagedBufferMapTest, MemoryOpenedAheadIsAddedLaterAndErrorsNameTheRankAndBuffer) {
  v1::RankLayout staged = destinations_.ranks(1);
  staged.set_staged(true);
  // Opened with no map at all (a registry does it before taking its lock).
  absl::StatusOr<BufferMap::OpenedRank> opened = BufferMap::OpenRank(v1::ROLE_DESTINATION, staged);
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ(opened->segments.size(), static_cast<size_t>(staged.buffers_size()));
  EXPECT_EQ(opened->shadows.size(), opened->segments.size());
  EXPECT_FALSE(map_.IsStaged(v1::ROLE_DESTINATION, 1));
  ASSERT_TRUE(map_.AddRank(v1::ROLE_DESTINATION, staged, nullptr, *std::move(opened)).ok());
  EXPECT_TRUE(map_.IsStaged(v1::ROLE_DESTINATION, 1));
  int64_t buffer_bytes = 0;
  for (const v1::BufferSpec& buffer : staged.buffers()) buffer_bytes += buffer.bytes();
  EXPECT_EQ(map_.ShadowBytes(), buffer_bytes);  // its shadows came with what was opened

  // Memory opened for another layout is refused, and nothing is kept.
  absl::StatusOr<BufferMap::OpenedRank> other =
      BufferMap::OpenRank(v1::ROLE_DESTINATION, destinations_.ranks(0));
  ASSERT_TRUE(other.ok()) << other.status();
  v1::RankLayout more_buffers = destinations_.ranks(0);
  *more_buffers.add_buffers() = more_buffers.buffers(0);
  const absl::Status mismatched =
      map_.AddRank(v1::ROLE_DESTINATION, more_buffers, nullptr, *std::move(other));
  EXPECT_EQ(mismatched.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(mismatched.message(), ::testing::HasSubstr("destination rank 0"));
  EXPECT_FALSE(map_.StillNamed(v1::ROLE_DESTINATION, 0));

  v1::RankLayout missing = destinations_.ranks(0);
  missing.mutable_buffers(0)->set_shm_name("/refit-no-such-segment");
  const absl::Status unopened = BufferMap::OpenRank(v1::ROLE_SOURCE, missing).status();
  EXPECT_FALSE(unopened.ok());
  EXPECT_THAT(unopened.message(),
              ::testing::HasSubstr(
                  absl::StrCat("source rank 0: buffer \"", missing.buffers(0).name(), "\"")));
}

// A bucketed destination rank: one shared-memory bucket, views with boxes and no memory.
// Locate refuses its views (nothing may read or write them in place); CheckBucketedBox
// still checks a box against them. Anything else is refused, naming the rank.
TEST_F(StagedBufferMapTest, ABucketedRankMapsItsBucketAndGivesItsViewsNoMemory) {
  v1::RankLayout rank = destinations_.ranks(0);
  const v1::BufferSpec bucket = rank.buffers(0);
  rank.set_bucketed(true);
  rank.clear_buffers();
  for (v1::ShardView& v : *rank.mutable_views()) {
    v.clear_buffer();
    v.clear_byte_offset();
    v.clear_strides();
  }
  auto expect_refused = [&](const v1::RankLayout& layout, v1::Role role, const std::string& why) {
    const absl::Status status = map_.AddRank(role, layout);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_NE(status.message().find(why), std::string::npos) << status;
  };
  expect_refused(rank, v1::ROLE_DESTINATION, "registers one buffer, its staging bucket");
  v1::RankLayout tiny = rank;
  *tiny.add_buffers() = bucket;
  tiny.mutable_buffers(0)->set_bytes(128);
  expect_refused(tiny, v1::ROLE_DESTINATION, "bucket of 128 bytes is too small");
  *rank.add_buffers() = bucket;
  ASSERT_GE(bucket.bytes(), BufferMap::kMinBucketBytes);
  expect_refused(rank, v1::ROLE_SOURCE, "only destination ranks, not staged, can be bucketed");
  v1::RankLayout named = rank;
  named.mutable_views(0)->set_buffer(bucket.name());
  expect_refused(named, v1::ROLE_DESTINATION, "but the rank is bucketed");

  ASSERT_TRUE(map_.AddRank(v1::ROLE_DESTINATION, rank).ok());
  EXPECT_TRUE(map_.IsBucketed(rank.rank()));
  ASSERT_TRUE(map_.BucketOf(rank.rank()).ok());
  EXPECT_EQ((*map_.BucketOf(rank.rank()))->bytes(), bucket.bytes());
  const v1::ShardView& view = rank.views(0);
  const Dims offset(view.offset().begin(), view.offset().end());
  const Dims extent(view.extent().begin(), view.extent().end());
  EXPECT_EQ(map_.Locate(v1::ROLE_DESTINATION, rank.rank(), 0, view.tensor(), offset, extent)
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(map_.CheckBucketedBox(rank.rank(), 0, view.tensor(), offset, extent).ok());
  Dims outside = extent;
  outside[0] += 1;
  EXPECT_EQ(map_.CheckBucketedBox(rank.rank(), 0, view.tensor(), offset, outside).code(),
            absl::StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace refit::transport

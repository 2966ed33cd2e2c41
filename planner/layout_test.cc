// Bad input: every case gives a clear INVALID_ARGUMENT naming the object and the reason.
#include "planner/layout.h"

#include <limits>

#include "gtest/gtest.h"
#include "planner/testing/layout_builder.h"

namespace refit::planner {
namespace {

using refit::testing::LayoutBuilder;

void ExpectInvalid(const v1::LayoutSpec& spec, const std::vector<std::string>& fragments) {
  absl::StatusOr<Layout> layout = CompileLayout(spec, "source");
  ASSERT_FALSE(layout.ok());
  EXPECT_EQ(layout.status().code(), absl::StatusCode::kInvalidArgument);
  for (const std::string& fragment : fragments) {
    EXPECT_NE(layout.status().message().find(fragment), std::string::npos)
        << "missing \"" << fragment << "\" in: " << layout.status().message();
  }
}

LayoutBuilder OneTensor(const std::vector<int64_t>& shape = {8, 4}) {
  LayoutBuilder b;
  b.Tensor("w", shape);
  return b;
}

TEST(LayoutTest, CompilesTheDocumentedForm) {
  LayoutBuilder b;
  b.Tensor("w", {1024, 4096}, "BF16").Rank(0, "node-0", 0).View(0, "w", {0, 0}, {512, 4096});
  absl::StatusOr<Layout> layout = CompileLayout(b.spec(), "source");
  ASSERT_TRUE(layout.ok()) << layout.status();
  ASSERT_EQ(layout->views.size(), 1u);
  EXPECT_EQ(layout->views[0].bytes, 512 * 4096 * 2);
  EXPECT_EQ(layout->ranks[0].buffers[0].bytes, 512 * 4096 * 2);  // its own dense buffer
  EXPECT_EQ(layout->views[0].strides, Dims({4096, 1}));
}

TEST(LayoutTest, UnknownDtype) {
  LayoutBuilder b;
  b.Tensor("w", {4}, "F12").View(0, "w", {0}, {4});
  ExpectInvalid(b.spec(), {"w", "unknown dtype \"F12\""});
}

TEST(LayoutTest, ZeroNegativeAndOverflowingDims) {
  ExpectInvalid(OneTensor({8, 0}).spec(), {"w", "[8, 0]", "not positive"});
  ExpectInvalid(OneTensor({-2, 4}).spec(), {"w", "not positive"});
  ExpectInvalid(OneTensor({int64_t{1} << 40, int64_t{1} << 30}).spec(), {"w", "overflows"});
}

TEST(LayoutTest, ZeroExtentViewsHoldNothingAndKeepTheOtherViewIds) {
  // torch.chunk of 8 rows in 3: 3, 3, 2; of 2 rows in 3: 1, 1, 0 (the last rank's is empty).
  LayoutBuilder b = OneTensor({2, 4});
  b.View(0, "w", {2, 0}, {0, 4}).View(0, "w", {0, 0}, {2, 4});
  absl::StatusOr<Layout> layout = CompileLayout(b.spec(), "source");
  ASSERT_TRUE(layout.ok()) << layout.status();
  ASSERT_EQ(layout->views.size(), 1u);
  EXPECT_EQ(layout->views[0].local_index, 1);  // the wire's view id is still its position
  EXPECT_EQ(layout->ranks[0].views.size(), 1u);
  ExpectInvalid(OneTensor().View(0, "w", {0, 0}, {8, -1}).spec(),
                {"w", "rank 0", "negative extent"});
  ExpectInvalid(OneTensor().View(0, "w", {9, 0}, {0, 4}).spec(), {"w", "outside the global"});
}

TEST(LayoutTest, ViewOutsideGlobalShape) {
  ExpectInvalid(OneTensor().View(3, "w", {4, 0}, {8, 4}).spec(),
                {"w", "rank 3", "[4:12, 0:4]", "outside the global shape [8, 4]"});
}

TEST(LayoutTest, ViewRankDoesNotMatchTensor) {
  ExpectInvalid(OneTensor().View(0, "w", {0}, {8}).spec(), {"w", "rank 0", "2 dims"});
}

TEST(LayoutTest, NegativeOffset) {
  ExpectInvalid(OneTensor().View(1, "w", {-1, 0}, {4, 4}).spec(),
                {"w", "rank 1", "negative offset"});
}

TEST(LayoutTest, StridesThatAlias) {
  ExpectInvalid(OneTensor().View(0, "w", {0, 0}, {8, 4}, "buf", 0, {2, 1}).spec(),
                {"w", "rank 0", "alias"});
}

TEST(LayoutTest, TwoViewsOverlappingInOneBuffer) {
  LayoutBuilder b = OneTensor();
  b.Tensor("v", {8, 4});
  b.View(0, "w", {0, 0}, {8, 4}, "fused", 0).View(0, "v", {0, 0}, {8, 4}, "fused", 64);
  absl::StatusOr<Layout> layout = CompileLayout(b.spec(), "destination");
  ASSERT_FALSE(layout.ok());
  EXPECT_NE(layout.status().message().find("rank 0: views w [0:8, 0:4] and v [0:8, 0:4] "
                                           "overlap in buffer \"fused\""),
            std::string::npos)
      << layout.status();
}

TEST(LayoutTest, SourceViewsMayShareMemoryAsTiedWeightsDo) {
  LayoutBuilder b = OneTensor();
  b.Tensor("head", {8, 4});
  b.View(0, "w", {0, 0}, {8, 4}, "embed", 0).View(0, "head", {0, 0}, {8, 4}, "embed", 0);
  absl::StatusOr<Layout> layout = CompileLayout(b.spec(), "source");
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->views[0].byte_offset, layout->views[1].byte_offset);
  EXPECT_EQ(layout->ranks[0].buffers.size(), 1u);
}

TEST(LayoutTest, FusedViewsSideBySideAreAccepted) {
  LayoutBuilder b = OneTensor();
  b.Tensor("v", {8, 4});
  // gate-up style: two [8, 4] views interleaved as the halves of an [8, 8] matrix.
  b.View(0, "w", {0, 0}, {8, 4}, "gate_up", 0, {8, 1})
      .View(0, "v", {0, 0}, {8, 4}, "gate_up", 16, {8, 1})
      .Buffer(0, "gate_up", 8 * 8 * 4);
  EXPECT_TRUE(CompileLayout(b.spec(), "source").ok());
}

// A bucketed rank: a destination, not staged, whose views name no buffer (its one buffer
// is the bucket); it changes the digest, so a plan made before it is not reused.
TEST(LayoutTest, BucketedRanksAreDestinationsWhoseViewsHoldNoMemory) {
  LayoutBuilder b = OneTensor();
  b.View(0, "w", {0, 0}, {8, 4}).Buffer(0, "bucket", 1 << 20);
  v1::LayoutSpec spec = b.spec();
  absl::StatusOr<Layout> plain = CompileLayout(spec, "destination");
  spec.mutable_ranks(0)->set_bucketed(true);
  absl::StatusOr<Layout> bucketed = CompileLayout(spec, "destination");
  ASSERT_TRUE(plain.ok() && bucketed.ok()) << bucketed.status();
  EXPECT_TRUE(bucketed->ranks[0].bucketed);
  EXPECT_NE(plain->digest, bucketed->digest);
  ExpectInvalid(spec, {"rank 0", "only destination ranks receive their weights in buckets"});

  v1::LayoutSpec staged = spec;
  staged.mutable_ranks(0)->set_staged(true);
  absl::StatusOr<Layout> refused = CompileLayout(staged, "destination");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("rank 0: a bucketed rank cannot be staged"),
            std::string::npos)
      << refused.status();

  v1::LayoutSpec named = spec;
  named.mutable_ranks(0)->mutable_views(0)->set_buffer("bucket");
  refused = CompileLayout(named, "destination");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("w: rank 0 is bucketed: its views name no buffer"),
            std::string::npos)
      << refused.status();
}

TEST(LayoutTest, ViewOutsideItsBuffer) {
  LayoutBuilder b = OneTensor();
  b.View(0, "w", {0, 0}, {8, 4}, "small", 0).Buffer(0, "small", 100);
  ExpectInvalid(b.spec(), {"w", "rank 0", "outside buffer \"small\" of 100 bytes"});
}

TEST(LayoutTest, StridesOrByteOffsetsThatWouldWrapAreRefused) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  // (8 - 1) * 2^60 wraps int64 into a small end that would pass the buffer-size check.
  ExpectInvalid(OneTensor().View(0, "w", {0, 0}, {8, 4}, "buf", 0, {int64_t{1} << 60, 1})
                    .Buffer(0, "buf", 4096)
                    .spec(),
                {"w", "rank 0", "strides [1152921504606846976, 1]", "reaches past byte 2^60"});
  ExpectInvalid(OneTensor().View(0, "w", {0, 0}, {8, 4}, "buf", 0, {kMax / 4, 1}).spec(),
                {"w", "rank 0", "overflow"});
  ExpectInvalid(OneTensor().View(0, "w", {0, 0}, {8, 4}, "buf", kMax - 7).spec(),
                {"w", "rank 0", "byte_offset 9223372036854775800", "overflow"});
  // Just inside the limit is fine (the views are validated, not refused by size).
  LayoutBuilder near = OneTensor();
  near.View(0, "w", {0, 0}, {8, 4}, "buf", int64_t{1} << 59);
  EXPECT_TRUE(CompileLayout(near.spec(), "source").ok());
}

TEST(LayoutTest, ManyInterleavedViewsInOneBufferAreRefusedNotValidatedForMinutes) {
  // Every column of a [2, 65536] matrix as its own view: each view's span covers the whole
  // buffer, so every pair would be compared.
  constexpr int64_t kColumns = 65536;
  LayoutBuilder b;
  b.Tensor("w", {2, kColumns});
  for (int64_t c = 0; c < kColumns; ++c) {
    b.View(0, "w", {0, c}, {2, 1}, "matrix", c * 4, {kColumns, 1});
  }
  absl::StatusOr<Layout> refused = CompileLayout(b.spec(), "destination");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find(
                "rank 0: buffer \"matrix\" holds 65536 views whose byte spans interleave"),
            std::string::npos)
      << refused.status();
  // Sources are only read: their views are not compared, so nothing is quadratic there.
  EXPECT_TRUE(CompileLayout(b.spec(), "source").ok());
  // A few thousand interleaved views (heads of a fused projection, say) are fine.
  LayoutBuilder heads;
  heads.Tensor("w", {2, 2048});
  for (int64_t c = 0; c < 2048; ++c) {
    heads.View(0, "w", {0, c}, {2, 1}, "matrix", c * 4, {2048, 1});
  }
  EXPECT_TRUE(CompileLayout(heads.spec(), "destination").ok());
}

TEST(LayoutTest, DuplicateRankIds) {
  LayoutBuilder b = OneTensor();
  b.View(0, "w", {0, 0}, {4, 4});
  v1::LayoutSpec spec = b.spec();
  *spec.add_ranks() = spec.ranks(0);
  ExpectInvalid(spec, {"rank 0 is declared twice"});
}

TEST(LayoutTest, DuplicateTensorNames) {
  LayoutBuilder b = OneTensor();
  b.Tensor("w", {4}).View(0, "w", {0, 0}, {4, 4});
  ExpectInvalid(b.spec(), {"w: tensor declared twice"});
}

TEST(LayoutTest, EmptyLayouts) {
  ExpectInvalid(v1::LayoutSpec(), {"empty", "no tensors"});
  ExpectInvalid(OneTensor().spec(), {"empty", "no ranks"});
}

TEST(LayoutTest, ViewOfUndeclaredTensor) {
  ExpectInvalid(OneTensor().View(2, "missing", {0}, {1}).spec(), {"missing", "rank 2"});
}

TEST(LayoutTest, DigestFollowsContent) {
  LayoutBuilder a = OneTensor(), b = OneTensor();
  a.View(0, "w", {0, 0}, {8, 4});
  b.View(0, "w", {0, 0}, {8, 4});
  EXPECT_EQ(CompileLayout(a.spec(), "source")->digest, CompileLayout(b.spec(), "source")->digest);
  b.View(1, "w", {0, 0}, {8, 4});
  EXPECT_NE(CompileLayout(a.spec(), "source")->digest, CompileLayout(b.spec(), "source")->digest);
}

}  // namespace
}  // namespace refit::planner

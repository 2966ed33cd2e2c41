// The CUDA copy calls chosen for strided boxes, checked on CPU: performed the way CUDA
// performs them, they must write exactly what the byte-by-byte reference writes (and
// nothing else), and the boxes the planner emits must take one call, not one per row.
#include "transport/gpu/copy_shape.h"

#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "transport/testing/strided_reference.h"

namespace refit::transport::gpu {
namespace {

using transport::testing::RandomExtent;
using transport::testing::RandomStrides;
using transport::testing::ReferenceCopy;
using transport::testing::Span;

// Runs the calls and the reference on identically poisoned destinations; true if equal.
bool SameAsReference(const Dims& extent, int eb, const Dims& ss, const Dims& ds,
                     std::mt19937& rng) {
  std::vector<uint8_t> src(Span(extent, ss) * eb);
  for (uint8_t& b : src) b = rng();
  std::vector<uint8_t> expected(Span(extent, ds) * eb, 0xA5), got = expected;
  ReferenceCopy(extent, eb, src.data(), ss, expected.data(), ds);
  EmulateCopyCalls(PlanCopyCalls(extent, eb, ss, ds), src.data(), got.data());
  return got == expected;
}

// Strides of a box inside a row-major array of `outer`.
Dims Inside(const Dims& outer) { return RowMajorStrides(outer); }

TEST(CopyShapeTest, RandomStridesMatchTheReference) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 3000; ++trial) {
    Dims extent = RandomExtent(rng, 5, 5);
    const int eb = 1 << (rng() % 4);
    const Dims ss = trial % 3 == 0 ? RowMajorStrides(extent) : RandomStrides(rng, extent);
    const Dims ds = trial % 4 == 0 ? RowMajorStrides(extent) : RandomStrides(rng, extent);
    ASSERT_TRUE(SameAsReference(extent, eb, ss, ds, rng)) << "trial " << trial;
  }
}

TEST(CopyShapeTest, PlannerBoxesInsideViewsMatchTheReference) {
  // Sub-boxes at random offsets of row-major views on both sides (what reshard emits).
  std::mt19937 rng(6);
  for (int trial = 0; trial < 2000; ++trial) {
    const size_t rank = 1 + rng() % 4;
    Dims extent, src_outer, dst_outer;
    for (size_t d = 0; d < rank; ++d) {
      extent.push_back(1 + rng() % 6);
      src_outer.push_back(extent.back() + (rng() % 2 ? rng() % 4 : 0));
      dst_outer.push_back(extent.back() + (rng() % 2 ? rng() % 4 : 0));
    }
    const int eb = 2;
    ASSERT_TRUE(SameAsReference(extent, eb, Inside(src_outer), Inside(dst_outer), rng))
        << "trial " << trial;
  }
}

TEST(CopyShapeTest, OneCallPerBoxWherePossible) {
  // A dense box: one 1-D copy.
  auto calls = PlanCopyCalls({64, 128}, 2, {128, 1}, {128, 1});
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].kind, CopyCallKind::k1D);
  EXPECT_EQ(calls[0].width, 64 * 128 * 2);

  // Column block of a row-major weight (a TP shard of a [7168, 18432] bf16 matrix) into a
  // dense destination: one 2-D copy of 7168 rows.
  calls = PlanCopyCalls({7168, 2048}, 2, {18432, 1}, {2048, 1});
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].kind, CopyCallKind::k2D);
  EXPECT_EQ(calls[0].width, 2048 * 2);
  EXPECT_EQ(calls[0].height, 7168);
  EXPECT_EQ(calls[0].src_pitch, 18432 * 2);
  EXPECT_EQ(calls[0].dst_pitch, 2048 * 2);

  // A 3-D slab of an expert stack [32, 512, 1024] cut on the last two dims: one 3-D copy.
  calls = PlanCopyCalls({8, 256, 512}, 2, {512 * 1024, 1024, 1}, {256 * 512, 512, 1});
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].kind, CopyCallKind::k3D);
  EXPECT_EQ(calls[0].depth, 8);
  EXPECT_EQ(calls[0].height, 256);
  EXPECT_EQ(calls[0].src_rows, 512);
  EXPECT_EQ(calls[0].dst_rows, 256);

  // Four strided dims: a loop of 3-D copies over the outermost.
  calls = PlanCopyCalls({3, 4, 5, 6}, 4, Inside({3, 8, 10, 12}), Inside({3, 4, 5, 6}));
  EXPECT_EQ(calls.size(), 3u);
  for (const CopyCall& call : calls) EXPECT_EQ(call.kind, CopyCallKind::k3D);

  // A transpose (column-major source): element-wide rows, still far fewer calls than
  // elements (one 2-D copy per source column).
  calls = PlanCopyCalls({16, 8}, 4, {1, 16}, {8, 1});
  EXPECT_LE(calls.size(), 16u);
}

TEST(CopyShapeTest, MemcpyKindFollowsWhereEachSideLives) {
  EXPECT_EQ(MemcpyKindOf(false, false), MemcpyKind::kHostToHost);
  EXPECT_EQ(MemcpyKindOf(false, true), MemcpyKind::kHostToDevice);
  EXPECT_EQ(MemcpyKindOf(true, false), MemcpyKind::kDeviceToHost);
  EXPECT_EQ(MemcpyKindOf(true, true), MemcpyKind::kDeviceToDevice);
}

}  // namespace
}  // namespace refit::transport::gpu

#include "planner/memory_overlap.h"

#include "gtest/gtest.h"

namespace refit::planner {
namespace {

TEST(StridesAliasTest, RowMajorColumnMajorAndAliasing) {
  EXPECT_FALSE(StridesAlias({4, 8}, {8, 1}));
  EXPECT_FALSE(StridesAlias({4, 8}, {1, 4}));   // column-major
  EXPECT_FALSE(StridesAlias({4, 8}, {16, 1}));  // padded rows
  EXPECT_TRUE(StridesAlias({4, 8}, {4, 1}));    // rows overlap
  EXPECT_TRUE(StridesAlias({4, 8}, {1, 1}));
  EXPECT_FALSE(StridesAlias({1, 8}, {0, 1}));  // a dim of one element never aliases
}

TEST(MayOverlapTest, FusedGateUpRowsAreDisjoint) {
  // gate rows [0, 4) and up rows [4, 8) of one [8, 16] F32 buffer.
  const StridedRegion gate{0, {4, 16}, {16, 1}, 4};
  const StridedRegion up{4 * 16 * 4, {4, 16}, {16, 1}, 4};
  EXPECT_FALSE(MayOverlap(gate, up));
  const StridedRegion shifted{3 * 16 * 4, {4, 16}, {16, 1}, 4};
  EXPECT_TRUE(MayOverlap(gate, shifted));
}

TEST(MayOverlapTest, InterleavedColumnsOfOneFrameAreDisjoint) {
  // Two [4, 8] views side by side in a [4, 16] row-major buffer (interleaved spans).
  const StridedRegion left{0, {4, 8}, {16, 1}, 2};
  const StridedRegion right{8 * 2, {4, 8}, {16, 1}, 2};
  EXPECT_FALSE(MayOverlap(left, right));
  const StridedRegion straddling{4 * 2, {4, 8}, {16, 1}, 2};
  EXPECT_TRUE(MayOverlap(left, straddling));
}

}  // namespace
}  // namespace refit::planner

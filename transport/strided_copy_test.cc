#include "transport/strided_copy.h"

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "transport/testing/strided_reference.h"
#include "xxhash.h"

namespace refit::transport {
namespace {

using testing::RandomExtent;
using testing::RandomStrides;
using testing::ReferenceCopy;
using testing::Span;

TEST(StridedCopyTest, MatchesTheByteByByteReference) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 3000; ++trial) {
    Dims extent = RandomExtent(rng, 4, 6);
    const int eb = 1 << (rng() % 4);
    const Dims ss = trial % 3 == 0 ? RowMajorStrides(extent) : RandomStrides(rng, extent);
    const Dims ds = trial % 5 == 0 ? RowMajorStrides(extent) : RandomStrides(rng, extent);
    std::vector<uint8_t> src(Span(extent, ss) * eb);
    for (auto& b : src) b = rng();
    std::vector<uint8_t> got(Span(extent, ds) * eb, 0xEE), want = got;
    CopyBox(extent, eb, StridedRef{src.data(), ss}, StridedRef{got.data(), ds});
    ReferenceCopy(extent, eb, src.data(), ss, want.data(), ds);
    ASSERT_EQ(got, want) << "trial " << trial;
  }
}

// Long contiguous runs take the streaming-store path: unaligned ends and odd lengths too.
TEST(StridedCopyTest, LongRunsAtAnyAlignment) {
  std::mt19937 rng(5);
  for (int64_t misalign : {0, 1, 7, 15}) {
    const Dims extent = {3, 70001};  // rows of 70001 bytes, longer than the streaming threshold
    const Dims src_strides = {80000, 1}, dst_strides = {70003, 1};
    std::vector<uint8_t> src(3 * 80000);
    for (auto& b : src) b = rng();
    std::vector<uint8_t> got(3 * 70003 + 16, 0xEE), want = got;
    CopyBox(extent, 1, StridedRef{src.data(), src_strides},
            StridedRef{got.data() + misalign, dst_strides});
    ReferenceCopy(extent, 1, src.data(), src_strides, want.data() + misalign, dst_strides);
    EXPECT_EQ(got, want) << "misalign " << misalign;
  }
}

TEST(StridedCopyTest, DenseBoxesAreOneRunAndColumnsAreMany) {
  EXPECT_EQ(CountRuns({4, 8, 16}, RowMajorStrides({4, 8, 16}), RowMajorStrides({4, 8, 16})), 1);
  // Rows of a [4, 8] window inside a [4, 32] matrix: one run per row.
  EXPECT_EQ(CountRuns({4, 8}, {32, 1}, {8, 1}), 4);
  // A column-major source: every element on its own.
  EXPECT_EQ(CountRuns({4, 8}, {1, 4}, {8, 1}), 32);
}

// Copies of one box in random memory layouts hash equal, and the hash is XXH3 of the dense
// row-major bytes; one changed byte changes it.
TEST(StridedCopyTest, HashBoxDependsOnContentsNotLayout) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    const int rank = 1 + trial % 4;
    Dims extent(rank);
    for (int64_t& e : extent) e = 1 + rng() % 6;
    const int eb = 1 << (rng() % 3);
    const Dims dense_strides = RowMajorStrides(extent);
    std::vector<uint8_t> dense(Span(extent, dense_strides) * eb);
    for (uint8_t& b : dense) b = rng();
    const Dims strides = RandomStrides(rng, extent);
    std::vector<uint8_t> strided(Span(extent, strides) * eb, 0xEE);
    ReferenceCopy(extent, eb, dense.data(), dense_strides, strided.data(), strides);
    const uint64_t expected = XXH3_64bits(dense.data(), dense.size());
    EXPECT_EQ(HashBox(extent, eb, StridedRef{dense.data(), dense_strides}), expected);
    EXPECT_EQ(HashBox(extent, eb, StridedRef{strided.data(), strides}), expected) << trial;
    dense[rng() % dense.size()] ^= 0x40;
    EXPECT_NE(HashBox(extent, eb, StridedRef{dense.data(), dense_strides}), expected);
  }
}

// A hashing copy writes what the plain one writes and hashes each side as HashBox does,
// also across the slices a long run is hashed in, and only the sides asked for.
TEST(StridedCopyTest, HashingCopyHashesBothSidesAsHashBox) {
  std::mt19937 rng(13);
  for (int trial = 0; trial < 400; ++trial) {
    Dims extent = RandomExtent(rng, 3, 6);
    if (trial % 4 == 0) extent.back() = 20000 + rng() % 50000;  // runs over several slices
    const int eb = 1 << (rng() % 4);
    const Dims ss = trial % 3 == 0 ? RowMajorStrides(extent) : RandomStrides(rng, extent);
    const Dims ds = trial % 2 == 0 ? RowMajorStrides(extent) : RandomStrides(rng, extent);
    std::vector<uint8_t> src(Span(extent, ss) * eb);
    for (auto& b : src) b = rng();
    std::vector<uint8_t> got(Span(extent, ds) * eb, 0xEE), want = got;
    uint64_t source_hash = 0, destination_hash = 0;
    const bool both = trial % 5 != 0;
    CopyBox(extent, eb, StridedRef{src.data(), ss}, StridedRef{got.data(), ds},
            both ? &source_hash : nullptr, &destination_hash);
    ReferenceCopy(extent, eb, src.data(), ss, want.data(), ds);
    ASSERT_EQ(got, want) << "trial " << trial;
    const uint64_t expected = HashBox(extent, eb, StridedRef{src.data(), ss});
    EXPECT_EQ(destination_hash, expected) << "trial " << trial;
    EXPECT_EQ(source_hash, both ? expected : 0) << "trial " << trial;
  }
}

}  // namespace
}  // namespace refit::transport

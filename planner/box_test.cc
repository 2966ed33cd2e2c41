#include "planner/box.h"

#include <random>

#include "gtest/gtest.h"

namespace refit::planner {
namespace {

Box MakeBox(Dims offset, Dims extent) { return Box{offset, extent}; }

TEST(BoxTest, IntersectAndFormat) {
  const Box a = MakeBox({0, 4}, {8, 8});
  const Box b = MakeBox({4, 0}, {8, 6});
  EXPECT_TRUE(Overlaps(a, b));
  EXPECT_EQ(FormatBox(Intersect(a, b)), "[4:8, 4:6]");
  EXPECT_FALSE(Overlaps(a, MakeBox({8, 0}, {1, 1})));
  EXPECT_TRUE(Intersect(a, MakeBox({8, 0}, {1, 1})).Empty());
}

TEST(BoxTest, SubtractPartitionsTheDifference) {
  std::mt19937 rng(7);
  auto random_box = [&](size_t rank) {
    Box box;
    for (size_t d = 0; d < rank; ++d) {
      box.offset.push_back(rng() % 6);
      box.extent.push_back(1 + rng() % 6);
    }
    return box;
  };
  for (int trial = 0; trial < 2000; ++trial) {
    const size_t rank = 1 + trial % 4;
    const Box a = random_box(rank), b = random_box(rank);
    std::vector<Box> parts;
    Subtract(a, b, &parts);
    ASSERT_LE(parts.size(), 2 * rank);
    int64_t volume = 0;
    for (size_t i = 0; i < parts.size(); ++i) {
      EXPECT_TRUE(Contains(a, parts[i]));
      EXPECT_FALSE(Overlaps(parts[i], b));
      for (size_t j = i + 1; j < parts.size(); ++j) EXPECT_FALSE(Overlaps(parts[i], parts[j]));
      volume += parts[i].Volume();
    }
    const int64_t common = Overlaps(a, b) ? Intersect(a, b).Volume() : 0;
    EXPECT_EQ(volume + common, a.Volume());
  }
}

TEST(BoxTest, TryMergeOnlyJoinsTouchingSlabs) {
  Box merged;
  EXPECT_TRUE(TryMerge(MakeBox({0, 0}, {2, 4}), MakeBox({2, 0}, {3, 4}), &merged));
  EXPECT_EQ(FormatBox(merged), "[0:5, 0:4]");
  EXPECT_FALSE(TryMerge(MakeBox({0, 0}, {2, 4}), MakeBox({3, 0}, {3, 4}), &merged));
  EXPECT_FALSE(TryMerge(MakeBox({0, 0}, {2, 4}), MakeBox({2, 1}, {3, 4}), &merged));
}

TEST(BoxTest, SplitAlongIsTorchChunk) {
  const std::vector<Box> parts = SplitAlong(MakeBox({10, 0}, {10, 3}), 0, 3);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(FormatBox(parts[0]), "[10:14, 0:3]");
  EXPECT_EQ(FormatBox(parts[1]), "[14:18, 0:3]");
  EXPECT_EQ(FormatBox(parts[2]), "[18:20, 0:3]");
  // More parts than elements: one element each.
  EXPECT_EQ(SplitAlong(MakeBox({0}, {2}), 0, 5).size(), 2u);
}

}  // namespace
}  // namespace refit::planner

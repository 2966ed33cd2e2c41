#include "planner/overlap_index.h"

#include <random>

#include "gtest/gtest.h"

namespace refit::planner {
namespace {

// The index returns exactly what a scan of every group would.
TEST(OverlapIndexTest, MatchesBruteForce) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    const size_t rank = 1 + trial % 3;
    std::vector<ViewGroup> groups;
    for (int g = 0; g < 40; ++g) {
      ViewGroup group;
      group.tensor = g % 2;
      for (size_t d = 0; d < rank; ++d) {
        group.box.offset.push_back(rng() % 20);
        group.box.extent.push_back(1 + rng() % 8);
      }
      groups.push_back(group);
    }
    std::sort(groups.begin(), groups.end(), [](const ViewGroup& a, const ViewGroup& b) {
      return a.tensor != b.tensor ? a.tensor < b.tensor : a.box < b.box;
    });
    OverlapIndex index(groups, 2);
    for (int q = 0; q < 20; ++q) {
      Box query;
      for (size_t d = 0; d < rank; ++d) {
        query.offset.push_back(rng() % 20);
        query.extent.push_back(1 + rng() % 10);
      }
      const int32_t tensor = q % 2;
      std::vector<int32_t> found, expected;
      index.Query(tensor, query, &found);
      for (int32_t g = 0; g < static_cast<int32_t>(groups.size()); ++g) {
        if (groups[g].tensor == tensor && Overlaps(groups[g].box, query)) expected.push_back(g);
      }
      EXPECT_EQ(found, expected);
    }
  }
}

}  // namespace
}  // namespace refit::planner

#include "planner/least_loaded_set.h"

#include <algorithm>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace refit::planner {
namespace {

// The scan LeastLoadedSet replaces: the first candidate, in insertion order, of the least load.
int32_t FirstLeastLoaded(const std::vector<int32_t>& ids, const std::vector<int64_t>& loads) {
  int32_t best = ids[0];
  for (int32_t id : ids) {
    if (loads[id] < loads[best]) best = id;
  }
  return best;
}

TEST(LeastLoadedSetTest, ChoosesWhatAScanInInsertionOrderChooses) {
  std::mt19937 random(7);
  for (int round = 0; round < 300; ++round) {
    const int num_ids = 1 + random() % 40;
    // Few distinct loads, so that ties are common.
    std::vector<int64_t> loads(num_ids);
    for (int64_t& load : loads) load = random() % 4;
    auto load_of = [&loads](int32_t id) { return loads[id]; };
    LeastLoadedSet<decltype(load_of)> set(load_of);
    std::vector<int32_t> added;
    std::vector<int32_t> order(num_ids);
    for (int i = 0; i < num_ids; ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), random);
    for (int step = 0; step < 200; ++step) {
      if (added.size() < order.size() && (added.empty() || random() % 3 == 0)) {
        added.push_back(order[added.size()]);
        set.Add(added.back());
      }
      const int32_t least = set.Least();
      ASSERT_EQ(least, FirstLeastLoaded(added, loads)) << "round " << round << " step " << step;
      // Loads only grow: the chosen one, and now and then any other.
      loads[least] += random() % 3;
      if (random() % 4 == 0) loads[added[random() % added.size()]] += 1 + random() % 2;
    }
  }
}

TEST(LeastLoadedSetTest, ClearForgetsEveryCandidate) {
  std::vector<int64_t> loads = {5, 1, 3};
  auto load_of = [&loads](int32_t id) { return loads[id]; };
  LeastLoadedSet<decltype(load_of)> set(load_of);
  set.Add(0);
  set.Add(1);
  EXPECT_EQ(set.Least(), 1);
  set.Clear();
  EXPECT_TRUE(set.empty());
  set.Add(2);
  set.Add(0);
  EXPECT_EQ(set.Least(), 2);
}

}  // namespace
}  // namespace refit::planner

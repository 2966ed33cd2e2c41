#include "planner/batch_order.h"

#include <random>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace refit::planner {
namespace {

TEST(BatchOrderTest, SortsByBatchAndKeepsTheOrderWithinEachBatch) {
  std::mt19937 random(11);
  for (int round = 0; round < 200; ++round) {
    Plan plan;
    plan.num_batches = 1 + random() % 12;
    const int num_transfers = random() % 300;
    for (int i = 0; i < num_transfers; ++i) {
      Transfer t;
      t.piece = i;  // the original position
      t.batch = random() % plan.num_batches;
      plan.transfers.push_back(t);
    }
    // What a stable sort gives: each batch's transfers in the order they came.
    std::vector<std::pair<int32_t, int32_t>> expected;
    for (int32_t b = 0; b < plan.num_batches; ++b) {
      for (const Transfer& t : plan.transfers) {
        if (t.batch == b) expected.push_back({t.batch, t.piece});
      }
    }
    SortByBatch(&plan);
    ASSERT_EQ(plan.transfers.size(), expected.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      EXPECT_EQ(plan.transfers[i].batch, expected[i].first) << "round " << round << ", at " << i;
      EXPECT_EQ(plan.transfers[i].piece, expected[i].second) << "round " << round << ", at " << i;
    }
  }
}

}  // namespace
}  // namespace refit::planner

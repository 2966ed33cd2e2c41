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

// Collected by batch as made, the transfers come out as SortByBatch orders the same list,
// across the blocks a batch grows in (one batch here holds more than a block).
TEST(BatchOrderTest, TransfersCollectedByBatchComeOutAsTheSortGivesThem) {
  std::mt19937 random(5);
  for (const int num_transfers : {0, 1, 1000, 700000}) {
    Plan plan;
    plan.num_batches = 4;
    TransfersByBatch collected;
    for (int i = 0; i < num_transfers; ++i) {
      Transfer t;
      t.piece = i;
      t.src.index = static_cast<int32_t>(random());
      t.batch = random() % 8 == 0 ? random() % plan.num_batches : 1;
      plan.transfers.push_back(t);
      collected.Add(t);
    }
    ASSERT_EQ(collected.size(), num_transfers);
    SortByBatch(&plan);
    std::vector<Transfer> out(3);  // replaced, not appended to
    collected.MoveTo(&out);
    ASSERT_EQ(out.size(), plan.transfers.size());
    for (size_t i = 0; i < out.size(); ++i) {
      ASSERT_EQ(out[i].batch, plan.transfers[i].batch) << "at " << i;
      ASSERT_EQ(out[i].piece, plan.transfers[i].piece) << "at " << i;
      ASSERT_EQ(out[i].src.index, plan.transfers[i].src.index) << "at " << i;
    }
    EXPECT_EQ(collected.size(), 0);
    EXPECT_EQ(collected.num_batches(), 0);
  }
}

}  // namespace
}  // namespace refit::planner

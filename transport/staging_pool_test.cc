#include "transport/staging_pool.h"

#include <cstring>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace refit::transport {
namespace {

TEST(StagingPoolTest, MessagesAreAlignedAndDoNotOverlap) {
  StagingPool pool(HostStagingAllocator());
  const std::vector<int64_t> sizes = {1, 300, 0, 4096, 17};
  absl::StatusOr<std::vector<uint8_t*>> carved = pool.Carve(-1, sizes);
  ASSERT_TRUE(carved.ok()) << carved.status();
  ASSERT_EQ(carved->size(), sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>((*carved)[i]) % StagingPool::kAlignment,
              reinterpret_cast<uintptr_t>((*carved)[0]) % StagingPool::kAlignment);
    if (i > 0) EXPECT_GE((*carved)[i], (*carved)[i - 1] + sizes[i - 1]);
    // Every byte of every message is writable without touching the others.
    std::memset((*carved)[i], static_cast<int>(i + 1), sizes[i]);
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    for (int64_t b = 0; b < sizes[i]; ++b) ASSERT_EQ((*carved)[i][b], i + 1);
  }
}

TEST(StagingPoolTest, ReusesMemoryUntilABatchNeedsMore) {
  StagingPool pool(HostStagingAllocator());
  ASSERT_TRUE(pool.Carve(-1, {1000, 1000}).ok());
  const int64_t held = pool.HeldBytes(-1);
  EXPECT_GE(held, 2000);
  for (int batch = 0; batch < 100; ++batch) ASSERT_TRUE(pool.Carve(-1, {500, 700, 10}).ok());
  EXPECT_EQ(pool.allocations(), 1);
  EXPECT_EQ(pool.HeldBytes(-1), held);
  ASSERT_TRUE(pool.Carve(-1, {held + 1}).ok());
  EXPECT_EQ(pool.allocations(), 2);
  EXPECT_GT(pool.HeldBytes(-1), held);
}

TEST(StagingPoolTest, KeepsOneBlockPerDevice) {
  std::vector<std::pair<int64_t, int32_t>> asked;
  StagingPool pool([&](int64_t bytes, int32_t device) -> absl::StatusOr<std::shared_ptr<uint8_t>> {
    asked.push_back({bytes, device});
    return std::shared_ptr<uint8_t>(new uint8_t[bytes], std::default_delete<uint8_t[]>());
  });
  ASSERT_TRUE(pool.Carve(0, {100}).ok());
  ASSERT_TRUE(pool.Carve(1, {100}).ok());
  ASSERT_TRUE(pool.Carve(0, {100}).ok());
  EXPECT_THAT(asked, testing::ElementsAre(testing::Pair(StagingPool::kAlignment, 0),
                                          testing::Pair(StagingPool::kAlignment, 1)));
  EXPECT_EQ(pool.HeldBytes(2), 0);
}

TEST(StagingPoolTest, AFailedAllocationNamesTheDeviceAndKeepsNothing) {
  StagingPool pool([](int64_t, int32_t) -> absl::StatusOr<std::shared_ptr<uint8_t>> {
    return absl::ResourceExhaustedError("out of memory");
  });
  absl::StatusOr<std::vector<uint8_t*>> carved = pool.Carve(3, {1 << 20});
  ASSERT_FALSE(carved.ok());
  EXPECT_EQ(carved.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(carved.status().message(), testing::HasSubstr("GPU 3"));
  EXPECT_THAT(carved.status().message(), testing::HasSubstr("out of memory"));
  EXPECT_EQ(pool.HeldBytes(3), 0);
}

TEST(StagingPoolTest, RejectsNegativeSizes) {
  StagingPool pool(HostStagingAllocator());
  EXPECT_EQ(pool.Carve(-1, {10, -1}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(StagingPoolTest, AnAbandonedBlockLivesWhileHeldAndTheNextCarveGetsAFreshOne) {
  StagingPool pool(HostStagingAllocator());
  absl::StatusOr<std::vector<uint8_t*>> first = pool.Carve(-1, {4096});
  ASSERT_TRUE(first.ok()) << first.status();
  std::shared_ptr<uint8_t> held = pool.BlockOf(-1);  // a receive UCX could not end
  ASSERT_EQ(held.get(), (*first)[0]);
  pool.Abandon(-1);
  EXPECT_EQ(pool.HeldBytes(-1), 0);
  std::memset(held.get(), 7, 4096);  // still valid memory
  absl::StatusOr<std::vector<uint8_t*>> next = pool.Carve(-1, {4096});
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_NE((*next)[0], held.get());
  EXPECT_EQ(pool.allocations(), 2);
}

}  // namespace
}  // namespace refit::transport

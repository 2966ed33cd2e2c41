// Copies spread over threads: every byte of every copy lands, whatever the number of
// threads and however uneven the copies; hashes match a copy on one thread; a copy that
// cannot be done says so without stopping the others.
#include "transport/host_copies.h"

#include <sys/mman.h>
#include <unistd.h>

#include <numeric>
#include <random>

#include "gtest/gtest.h"

namespace refit::transport {
namespace {

// Copies of rows of a [rows, 1024] byte matrix into a destination of the same shape, one
// copy per run of rows of random height (some large enough to get threads of their own).
struct Rows {
  explicit Rows(int seed) {
    std::mt19937 rng(seed);
    source.resize(kRows * kCols);
    std::iota(source.begin(), source.end(), uint8_t{0});
    for (uint8_t& b : source) b ^= static_cast<uint8_t>(rng());
    destination.assign(source.size(), 0);
    for (int64_t row = 0; row < kRows;) {
      const int64_t height = std::min<int64_t>(kRows - row, 1 + rng() % 3000);
      HostCopy& copy = copies.emplace_back();
      copy.extent = {height, kCols};
      copy.element_bytes = 1;
      copy.from = ConstStridedRef{source.data() + row * kCols, {kCols, 1}, -1};
      copy.to = StridedRef{destination.data() + row * kCols, {kCols, 1}, -1};
      copy.hash_source = copy.hash_destination = true;
      row += height;
    }
  }
  static constexpr int64_t kRows = 20000, kCols = 1024;  // 20 MB
  std::vector<uint8_t> source, destination;
  std::vector<HostCopy> copies;
};

TEST(HostCopiesTest, EveryCopyLandsOnAnyNumberOfThreads) {
  for (int threads : {1, 2, 3, 8}) {
    Rows one(threads), many(threads);
    RunHostCopies(&one.copies, 1);
    RunHostCopies(&many.copies, threads);
    EXPECT_EQ(many.destination, many.source) << threads << " threads";
    ASSERT_EQ(one.copies.size(), many.copies.size());
    for (size_t i = 0; i < many.copies.size(); ++i) {
      ASSERT_TRUE(many.copies[i].status.ok()) << many.copies[i].status;
      EXPECT_EQ(many.copies[i].source_hash, one.copies[i].source_hash);
      EXPECT_EQ(many.copies[i].destination_hash, one.copies[i].destination_hash);
      EXPECT_EQ(many.copies[i].source_hash, many.copies[i].destination_hash);
    }
  }
}

TEST(HostCopiesTest, ACopyThatFaultsFailsAloneAndTheOthersLand) {
  Rows rows(7);
  ASSERT_GE(rows.copies.size(), 3u);
  // A source whose memory went away (a segment its owner truncated): SIGBUS, which the
  // guard turns into the copy's error.
  const int fd = memfd_create("host-copies-test", 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 4096), 0);
  void* lost = mmap(nullptr, 4096, PROT_READ, MAP_SHARED, fd, 0);
  ASSERT_NE(lost, MAP_FAILED);
  ASSERT_EQ(ftruncate(fd, 0), 0);
  HostCopy& bad = rows.copies[1];
  bad.from.base = static_cast<const uint8_t*>(lost);
  bad.extent = {1, 16};
  RunHostCopies(&rows.copies, 2);
  munmap(lost, 4096);
  close(fd);
  EXPECT_FALSE(bad.status.ok());
  for (size_t i = 0; i < rows.copies.size(); ++i) {
    if (i != 1) EXPECT_TRUE(rows.copies[i].status.ok()) << i << ": " << rows.copies[i].status;
  }
}

}  // namespace
}  // namespace refit::transport

#include "transport/shared_memory.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "transport/testing/backed_layouts.h"

namespace refit::transport {
namespace {

std::string UniqueName(const char* what) { return testing::UniqueShmName(what); }

TEST(SharedMemoryTest, CreatorAndOpenerShareBytes) {
  const std::string name = UniqueName("share");
  auto created = SharedMemorySegment::Create(name, 4096);
  ASSERT_TRUE(created.ok()) << created.status();
  std::memcpy((*created)->data() + 100, "weights", 7);
  auto opened = SharedMemorySegment::Open(name, 4096);
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ(std::memcmp((*opened)->data() + 100, "weights", 7), 0);
  (*opened)->data()[0] = 42;
  EXPECT_EQ((*created)->data()[0], 42);
}

TEST(SharedMemoryTest, CreatorUnlinksOnDestruction) {
  const std::string name = UniqueName("unlink");
  { ASSERT_TRUE(SharedMemorySegment::Create(name, 64).ok()); }
  auto reopened = SharedMemorySegment::Open(name, 1);
  EXPECT_EQ(reopened.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(reopened.status().message().find(name), std::string::npos);
}

TEST(SharedMemoryTest, SegmentsAreTheOwnersOnly) {
  const std::string name = UniqueName("mode");
  auto created = SharedMemorySegment::Create(name, 64);
  ASSERT_TRUE(created.ok());
  struct stat info;
  ASSERT_EQ(stat(("/dev/shm" + name).c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600);
}

TEST(SharedMemoryTest, ASegmentOfAnotherUserIsNeverMapped) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to hand a segment to another user";
  const std::string name = UniqueName("foreign");
  auto created = SharedMemorySegment::Create(name, 64);
  ASSERT_TRUE(created.ok());
  if (chown(("/dev/shm" + name).c_str(), 65534, 65534) != 0) {
    // A sandbox's user namespace may map no other user.
    GTEST_SKIP() << "cannot hand a segment to uid 65534 here: " << std::strerror(errno);
  }
  auto opened = SharedMemorySegment::Open(name, 1);
  EXPECT_EQ(opened.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(opened.status().message().find("belongs to uid 65534"), std::string::npos)
      << opened.status();
}

TEST(SharedMemoryTest, UnlinkingRemovesTheNameOnce) {
  const std::string name = UniqueName("reclaim");
  auto created = SharedMemorySegment::Create(name, 64);
  ASSERT_TRUE(created.ok());
  EXPECT_TRUE(UnlinkSharedMemory(name).ok());
  EXPECT_EQ(SharedMemorySegment::Open(name, 1).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(UnlinkSharedMemory(name).ok());  // already gone: fine
  // The creator's mapping still works; its own unlink at the end finds nothing to do.
  (*created)->data()[0] = 1;
  EXPECT_EQ(UnlinkSharedMemory("bad/name").code(), absl::StatusCode::kInvalidArgument);
}

TEST(SharedMemoryTest, ErrorsNameTheSegmentAndTheReason) {
  const std::string name = UniqueName("errors");
  auto created = SharedMemorySegment::Create(name, 128);
  ASSERT_TRUE(created.ok());
  EXPECT_EQ(SharedMemorySegment::Create(name, 128).status().code(),
            absl::StatusCode::kAlreadyExists);
  auto too_small = SharedMemorySegment::Open(name, 4096);
  EXPECT_EQ(too_small.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(too_small.status().message().find("fewer than the 4096"), std::string::npos);
  EXPECT_EQ(SharedMemorySegment::Create("no-slash", 8).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SharedMemorySegment::Create(UniqueName("zero"), 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace refit::transport

#include "transport/shared_memory.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <vector>

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

// Pages of a mapping that are in memory (backed), by mincore.
int64_t ResidentPages(const uint8_t* data, int64_t bytes) {
  const int64_t page = sysconf(_SC_PAGESIZE);
  std::vector<unsigned char> resident((bytes + page - 1) / page);
  if (mincore(const_cast<uint8_t*>(data), bytes, resident.data()) != 0) return -1;
  int64_t count = 0;
  for (unsigned char r : resident) count += r & 1;
  return count;
}

// A segment made as the clients make theirs: a name and a size, no page written.
int MakeSparseSegment(const std::string& name, int64_t bytes) {
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd >= 0 && ftruncate(fd, bytes) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

TEST(SharedMemoryTest, AnOpenedSegmentIsBackedBeforeOpenReturns) {
  const std::string name = UniqueName("sparse");
  constexpr int64_t kBytes = 1 << 20;
  const int fd = MakeSparseSegment(name, kBytes);
  ASSERT_GE(fd, 0);
  auto opened = SharedMemorySegment::Open(name, kBytes);
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ(ResidentPages((*opened)->data(), kBytes), kBytes / sysconf(_SC_PAGESIZE));
  EXPECT_TRUE((*opened)->CheckBacked().ok());
  close(fd);
  shm_unlink(name.c_str());
}

TEST(SharedMemoryTest, ASegmentTruncatedAfterOpeningIsNoLongerBacked) {
  const std::string name = UniqueName("truncated");
  auto created = SharedMemorySegment::Create(name, 1 << 16);
  ASSERT_TRUE(created.ok());
  auto opened = SharedMemorySegment::Open(name, 1 << 16);
  ASSERT_TRUE(opened.ok()) << opened.status();
  const int fd = shm_open(name.c_str(), O_RDWR, 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 100), 0);
  close(fd);
  const absl::Status backed = (*opened)->CheckBacked();
  EXPECT_EQ(backed.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(backed.message().find(name), std::string::npos) << backed;
  EXPECT_NE(backed.message().find("truncated to 100 bytes"), std::string::npos) << backed;
}

// On a /dev/shm too small for a sparse segment, opening it fails with a named error instead
// of a SIGBUS at the first write. Runs in a child with its own mount namespace and a 1 MiB
// /dev/shm (needs CAP_SYS_ADMIN: skipped where the test may not mount).
TEST(SharedMemoryTest, ASparseSegmentOnAFullDevShmIsRefusedAtOpen) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (unshare(CLONE_NEWNS) != 0 || mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) ||
        mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=1m") != 0) {
      _exit(77);
    }
    const std::string name = UniqueName("full");
    if (MakeSparseSegment(name, 8 << 20) < 0) _exit(3);
    auto opened = SharedMemorySegment::Open(name, 8 << 20);
    if (opened.ok()) _exit(4);
    if (opened.status().code() != absl::StatusCode::kResourceExhausted) _exit(5);
    if (opened.status().message().find(name) == std::string::npos) _exit(6);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status);
  if (WEXITSTATUS(status) == 77) GTEST_SKIP() << "no permission to mount a small /dev/shm";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "step that failed: " << WEXITSTATUS(status);
}

}  // namespace
}  // namespace refit::transport

#include "transport/memory_fault_guard.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace refit::transport {
namespace {

using ::testing::HasSubstr;

// Two pages of a file mapped shared, then the file truncated to nothing: what
// ftruncate on a shared-memory segment does to refitd's mapping of it.
class TruncatedMapping {
 public:
  TruncatedMapping() {
    FILE* file = std::tmpfile();
    fd_ = dup(fileno(file));
    std::fclose(file);
    size_ = 2 * sysconf(_SC_PAGESIZE);
    EXPECT_EQ(ftruncate(fd_, size_), 0);
    data_ = static_cast<char*>(mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0));
    EXPECT_NE(data_, MAP_FAILED);
    std::memset(data_, 7, size_);
    EXPECT_EQ(ftruncate(fd_, 0), 0);
  }
  ~TruncatedMapping() {
    munmap(data_, size_);
    close(fd_);
  }
  char* data() { return data_; }
  size_t size() const { return size_; }

 private:
  int fd_ = -1;
  size_t size_ = 0;
  char* data_ = nullptr;
};

TEST(MemoryFaultGuardTest, AWriteToATruncatedSegmentIsAnErrorNotACrash) {
  TruncatedMapping mapping;
  const absl::Status status = GuardMemoryAccess("writing view \"w\" of destination rank 0",
                                                [&] { std::memset(mapping.data(), 1, mapping.size()); });
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(status.message(), HasSubstr("writing view \"w\" of destination rank 0"));
  EXPECT_THAT(status.message(), HasSubstr("truncated"));
  // And again: the guard keeps working after a fault.
  EXPECT_EQ(GuardMemoryAccess("again", [&] { std::memset(mapping.data(), 1, 1); }).code(),
            absl::StatusCode::kDataLoss);
}

TEST(MemoryFaultGuardTest, AnAccessThatDoesNotFaultRunsToTheEnd) {
  char buffer[64] = {};
  EXPECT_TRUE(GuardMemoryAccess("copy", [&] { std::memset(buffer, 3, sizeof(buffer)); }).ok());
  EXPECT_EQ(buffer[63], 3);
}

TEST(MemoryFaultGuardTest, GuardsNestAndTheInnerOneCatchesItsFault) {
  TruncatedMapping mapping;
  absl::Status inner;
  const absl::Status outer = GuardMemoryAccess("outer", [&] {
    inner = GuardMemoryAccess("inner", [&] { mapping.data()[0] = 1; });
  });
  EXPECT_TRUE(outer.ok());
  EXPECT_EQ(inner.code(), absl::StatusCode::kDataLoss);
}

// Their handler: 42 for a fault outside a guard, 1 if a guarded fault reached it.
volatile sig_atomic_t in_guarded_access = 0;
void ExitWith42(int) { _exit(in_guarded_access ? 1 : 42); }

TEST(MemoryFaultGuardDeathTest, AHandlerInstalledLaterIsChainedAndTheGuardStillWorks) {
  GuardMemoryAccess("install", [] {}).IgnoreError();
  EXPECT_EXIT(
      {
        // Another library puts its own SIGBUS handler in after the guard's (UCX may).
        struct sigaction theirs = {};
        theirs.sa_handler = ExitWith42;
        sigemptyset(&theirs.sa_mask);
        sigaction(SIGBUS, &theirs, nullptr);
        TruncatedMapping mapping;
        in_guarded_access = 1;
        const bool caught =
            GuardMemoryAccess("guarded", [&] { mapping.data()[0] = 1; }).code() ==
            absl::StatusCode::kDataLoss;
        in_guarded_access = 0;
        if (!caught) std::exit(1);
        mapping.data()[0] = 1;  // outside a guard: theirs decides
        std::exit(0);
      },
      ::testing::ExitedWithCode(42), "");
}

TEST(MemoryFaultGuardDeathTest, AFaultOutsideAGuardStillEndsTheProcess) {
  GuardMemoryAccess("install", [] {}).IgnoreError();
  EXPECT_EXIT(
      {
        TruncatedMapping mapping;
        mapping.data()[0] = 1;
        std::exit(0);
      },
      ::testing::KilledBySignal(SIGBUS), "");
}

}  // namespace
}  // namespace refit::transport

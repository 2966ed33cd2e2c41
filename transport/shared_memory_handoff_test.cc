#include "transport/shared_memory_handoff.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "gtest/gtest.h"

namespace refit::transport {
namespace {

TEST(SharedMemoryHandoffTest, ADomainNamesTheBootTheShmFileSystemAndTheUser) {
  const std::string domain = SharedMemoryDomain();
  ASSERT_FALSE(domain.empty()) << "this machine has /proc and /dev/shm";
  EXPECT_NE(domain.find("boot "), std::string::npos) << domain;
  EXPECT_NE(domain.find("/dev/shm "), std::string::npos) << domain;
  EXPECT_EQ(domain, SharedMemoryDomain()) << "the same process, the same domain";
}

TEST(SharedMemoryHandoffTest, NoticesRoundTripAndAnythingElseIsRefused) {
  const HandoffNotice notice{"/refit-outbox-12-abcdef01-3", 4096, 1 << 20};
  const EncodedNotice encoded = EncodeNotice(notice);
  absl::StatusOr<HandoffNotice> decoded = DecodeNotice(encoded.data(), encoded.size());
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->segment, notice.segment);
  EXPECT_EQ(decoded->offset, notice.offset);
  EXPECT_EQ(decoded->bytes, notice.bytes);

  EXPECT_FALSE(DecodeNotice(encoded.data(), encoded.size() - 1).ok()) << "short";
  EncodedNotice damaged = encoded;
  damaged[0] ^= 1;
  EXPECT_FALSE(DecodeNotice(damaged.data(), damaged.size()).ok()) << "not a notice";
  // Only outbox segments may be named: a peer cannot make a daemon map a rank's segment.
  for (const HandoffNotice& bad :
       {HandoffNotice{"/weights-rank-0", 0, 8}, HandoffNotice{"/refit-outbox-1/../x", 0, 8},
        HandoffNotice{"/refit-outbox-1", -8, 8}, HandoffNotice{"/refit-outbox-1", 0, -1}}) {
    const EncodedNotice bytes = EncodeNotice(bad);
    const absl::StatusOr<HandoffNotice> refused = DecodeNotice(bytes.data(), bytes.size());
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << bad.segment;
  }
}

TEST(SharedMemoryHandoffTest, AReceiverReadsWhatTheSenderPackedAndNothingOutsideIt) {
  SharedMemoryOutbox outbox;
  absl::StatusOr<std::vector<uint8_t*>> slots = outbox.Carve({1000, 3000});
  ASSERT_TRUE(slots.ok()) << slots.status();
  ASSERT_EQ(slots->size(), 2u);
  std::memset((*slots)[1], 0x5a, 3000);
  const HandoffNotice notice = outbox.NoticeFor((*slots)[1], 3000);
  EXPECT_EQ(notice.offset % 256, 0);

  SharedMemoryInboxes inboxes;
  absl::StatusOr<const uint8_t*> located = inboxes.Locate(/*peer=*/3, notice);
  ASSERT_TRUE(located.ok()) << located.status();
  EXPECT_EQ((*located)[0], 0x5a);
  EXPECT_EQ((*located)[2999], 0x5a);
  // Written later, seen at once: one memory, not a copy.
  (*slots)[1][7] = 0x11;
  EXPECT_EQ((*located)[7], 0x11);

  HandoffNotice beyond = notice;
  beyond.bytes = outbox.held_bytes();
  EXPECT_EQ(inboxes.Locate(3, beyond).status().code(), absl::StatusCode::kOutOfRange);
  HandoffNotice missing = notice;
  missing.segment = "/refit-outbox-0-00000000-9";
  EXPECT_EQ(inboxes.Locate(3, missing).status().code(), absl::StatusCode::kNotFound);
}

TEST(SharedMemoryHandoffTest, TheOutboxIsKeptUntilABatchNeedsMoreThenReplacedUnderANewName) {
  SharedMemoryOutbox outbox;
  ASSERT_TRUE(outbox.Carve({4096, 4096}).ok());
  absl::StatusOr<std::vector<uint8_t*>> again = outbox.Carve({100, 200, 300});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(outbox.allocations(), 1);
  const std::string first = outbox.NoticeFor((*again)[0], 100).segment;
  absl::StatusOr<std::vector<uint8_t*>> larger = outbox.Carve({1 << 20});
  ASSERT_TRUE(larger.ok());
  EXPECT_EQ(outbox.allocations(), 2);
  EXPECT_GE(outbox.held_bytes(), 1 << 20);
  const HandoffNotice second = outbox.NoticeFor((*larger)[0], 1 << 20);
  EXPECT_NE(second.segment, first);
  // A receiver maps the new one when it is named.
  SharedMemoryInboxes inboxes;
  EXPECT_TRUE(inboxes.Locate(0, second).ok());
  // The old name is gone with the old segment.
  EXPECT_EQ(inboxes.Locate(0, {first, 0, 8}).status().code(), absl::StatusCode::kNotFound);
}

// A daemon killed with its outbox leaves the segment in /dev/shm; the next daemon to start
// removes it, and leaves alone the outbox of a daemon that lives.
TEST(SharedMemoryHandoffTest, TheOutboxOfADeadDaemonIsRemovedAndALiveOnesIsNot) {
  SharedMemoryOutbox live;
  ASSERT_TRUE(live.Carve({4096}).ok());
  uint8_t* live_chunk = *live.Carve({4096})->begin();
  const std::string live_name = live.NoticeFor(live_chunk, 1).segment;

  int names[2];
  ASSERT_EQ(pipe(names), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // a daemon that dies holding its outbox: no destructor runs
    SharedMemoryOutbox outbox;
    absl::StatusOr<std::vector<uint8_t*>> carved = outbox.Carve({1 << 16});
    if (!carved.ok()) _exit(1);
    const std::string name = outbox.NoticeFor(carved->front(), 1).segment;
    if (write(names[1], name.data(), name.size()) != static_cast<ssize_t>(name.size())) _exit(1);
    raise(SIGKILL);
  }
  close(names[1]);
  char buffer[128] = {};
  const ssize_t length = read(names[0], buffer, sizeof(buffer) - 1);
  close(names[0]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the child should have died by SIGKILL";
  ASSERT_GT(length, 0);
  const std::string dead_name(buffer, length);
  const int left = shm_open(dead_name.c_str(), O_RDONLY, 0);
  ASSERT_GE(left, 0) << dead_name << " should be left behind by the killed daemon";
  close(left);

  const std::vector<std::string> removed = RemoveOrphanedOutboxes();
  EXPECT_NE(std::find(removed.begin(), removed.end(), dead_name), removed.end()) << dead_name;
  EXPECT_EQ(std::find(removed.begin(), removed.end(), live_name), removed.end()) << live_name;
  EXPECT_LT(shm_open(dead_name.c_str(), O_RDONLY, 0), 0) << dead_name << " is still there";
  const int still = shm_open(live_name.c_str(), O_RDONLY, 0);
  EXPECT_GE(still, 0) << "the live outbox " << live_name << " was removed";
  if (still >= 0) close(still);
}

}  // namespace
}  // namespace refit::transport

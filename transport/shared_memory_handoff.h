// Chunks handed between two refitd daemons of one host through shared memory instead of
// over UCX. UCX 1.13 offers its shared-memory transports only to endpoints without peer
// error handling, and without it a dead peer would go unnoticed; so the bytes and the
// signalling part ways: the sender packs a chunk into its outbox (a shared-memory segment
// it owns, kept across epochs) and sends over its ordinary UCX endpoint a notice naming the
// segment, offset and length; the receiver maps the segment (once), unpacks straight from
// it, and answers with a receipt, after which the sender may reuse that part of the outbox.
// A dead or stopped peer ends the epoch as before: the notice or the receipt is a UCX
// message, with peer error handling and the stall limit. One copy at each end, no socket.
#ifndef REFIT_TRANSPORT_SHARED_MEMORY_HANDOFF_H_
#define REFIT_TRANSPORT_SHARED_MEMORY_HANDOFF_H_

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "transport/shared_memory.h"

namespace refit::transport {

// Who shares /dev/shm with whom: the boot, the /dev/shm file system (device and inode, so
// containers that mount one tmpfs there match) and the user. Two daemons with equal,
// non-empty domains hand chunks over through shared memory. "" when it cannot be told.
std::string SharedMemoryDomain();

// What a notice says: where in the sender's outbox a chunk lies.
struct HandoffNotice {
  std::string segment;
  int64_t offset = 0;
  int64_t bytes = 0;
};

// A notice as the bytes of one UCX message (fixed size, so a receive can be posted for it).
static constexpr int64_t kHandoffNoticeBytes = 96;
using EncodedNotice = std::array<uint8_t, kHandoffNoticeBytes>;
EncodedNotice EncodeNotice(const HandoffNotice& notice);
// INVALID_ARGUMENT for a message that is not a notice of an outbox segment.
absl::StatusOr<HandoffNotice> DecodeNotice(const uint8_t* message, int64_t bytes);

// The sender's side: one segment, grown (as a new segment, under a new name) when a batch
// needs more than any before it, and carved into that batch's chunks.
class SharedMemoryOutbox {
 public:
  SharedMemoryOutbox();
  // Memory for chunks of `sizes` bytes, aligned and not overlapping, valid until the next
  // Carve. A new segment has every page touched before this returns.
  absl::StatusOr<std::vector<uint8_t*>> Carve(const std::vector<int64_t>& sizes);
  // The notice for the chunk of `bytes` at `at` (a pointer Carve returned).
  HandoffNotice NoticeFor(const uint8_t* at, int64_t bytes) const;
  int64_t held_bytes() const { return segment_ == nullptr ? 0 : segment_->bytes(); }
  int64_t allocations() const { return allocations_; }

 private:
  const std::string prefix_;  // unique to this object: "/refit-outbox-<pid>-<random>-"
  std::unique_ptr<SharedMemorySegment> segment_;
  int64_t allocations_ = 0;
};

// Removes the outbox segments (of this user, in this /dev/shm) whose daemon died without
// removing them: each outbox is flocked by its daemon while it lives. Returns their names.
std::vector<std::string> RemoveOrphanedOutboxes();

// The receiver's side: the outbox segment of each peer daemon, mapped at its first notice
// and replaced when the peer names another one.
class SharedMemoryInboxes {
 public:
  // The chunk `notice` (from daemon `peer`) names, checked to lie inside its segment.
  absl::StatusOr<const uint8_t*> Locate(int32_t peer, const HandoffNotice& notice);

 private:
  std::map<int32_t, std::unique_ptr<SharedMemorySegment>> mapped_;
};

}  // namespace refit::transport

#endif  // REFIT_TRANSPORT_SHARED_MEMORY_HANDOFF_H_

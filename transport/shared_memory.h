// POSIX shared-memory segments, mapped for the lifetime of the object. Ranks create the
// segments that hold their host weights; refitd opens them by name. The creator unlinks
// the name when it goes away; an opener only unmaps.
#ifndef REFIT_TRANSPORT_SHARED_MEMORY_H_
#define REFIT_TRANSPORT_SHARED_MEMORY_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "transport/mapped_buffer.h"

namespace refit::transport {

class SharedMemorySegment : public MappedBuffer {
 public:
  // Creates a new segment of `bytes` (zero-filled); fails if the name exists. With
  // `locked_while_alive` the creator holds a shared flock on it until the object goes (taken
  // before the segment is sized), so another process can tell a segment whose creator died
  // without removing it: it is sized and can be locked exclusively (IsOrphan).
  static absl::StatusOr<std::unique_ptr<SharedMemorySegment>> Create(
      const std::string& name, int64_t bytes, bool locked_while_alive = false);
  // Maps an existing segment; fails unless it holds at least `min_bytes` and belongs to
  // this process's user (PERMISSION_DENIED: refitd never maps another user's memory).
  // Every page is backed before this returns (a sparse segment on a full /dev/shm is
  // RESOURCE_EXHAUSTED here, not a SIGBUS at the first write), and the descriptor stays
  // open so that CheckBacked can see a segment its owner truncated later.
  static absl::StatusOr<std::unique_ptr<SharedMemorySegment>> Open(const std::string& name,
                                                                   int64_t min_bytes);

  ~SharedMemorySegment();
  SharedMemorySegment(const SharedMemorySegment&) = delete;
  SharedMemorySegment& operator=(const SharedMemorySegment&) = delete;

  const std::string& name() const { return name_; }
  uint8_t* data() const override { return data_; }
  int64_t bytes() const override { return bytes_; }
  // FAILED_PRECONDITION when the segment now holds fewer bytes than were mapped.
  absl::Status CheckBacked() const override;
  // Opened segments: whether the name still leads to the mapped segment (the same inode).
  bool StillNamed() const override;

 private:
  SharedMemorySegment(std::string name, uint8_t* data, int64_t bytes, bool owner, int fd,
                      int lock_fd = -1)
      : name_(std::move(name)), data_(data), bytes_(bytes), owner_(owner), fd_(fd),
        lock_fd_(lock_fd) {}

  std::string name_;
  uint8_t* data_;
  int64_t bytes_;
  bool owner_;
  int fd_;  // opened segments: kept to watch the size; -1 for created ones
  int lock_fd_;  // created with locked_while_alive: holds the creator's flock; else -1
};

// Whether the segment `name` (of this process's user) was created with locked_while_alive
// by a process that is gone: it is sized and nobody holds its flock.
bool IsOrphan(const std::string& name);

// Removes the name of a segment whose creator died without removing it (the memory goes
// once the last mapping does). A name already gone is not an error.
absl::Status UnlinkSharedMemory(const std::string& name);

}  // namespace refit::transport

#endif  // REFIT_TRANSPORT_SHARED_MEMORY_H_

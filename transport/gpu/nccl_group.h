// A daemon's GPUs in a refit group's NCCL communicator. The coordinator hands every daemon
// the same unique id (NewUniqueId); each daemon joins with all of its GPUs at once (one
// ncclGroupStart/End around their inits, as NCCL requires when one thread drives several
// GPUs). Every step's sends and receives, for all of the daemon's GPUs, go in one group
// too, so no GPU's calls wait behind another's. Joining and every step end by a deadline:
// a failure or timeout aborts the communicators (ncclCommAbort), so a dead peer never
// hangs an epoch, and the group must be joined again. Without CUDA in the build every
// call is UNIMPLEMENTED.
#ifndef REFIT_TRANSPORT_GPU_NCCL_GROUP_H_
#define REFIT_TRANSPORT_GPU_NCCL_GROUP_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "transport/interrupt.h"

namespace refit::transport::gpu {

class NcclGroup {
 public:
  // A new ncclUniqueId, as bytes to hand out.
  static absl::StatusOr<std::string> NewUniqueId();

  // One of this daemon's GPUs: its rank in the communicator and its CUDA device.
  struct Member {
    int rank = 0;
    int device = 0;
  };
  // Joins `members` into the communicator of `size` ranks named by `unique_id`; gives up
  // at the deadline or once `interrupt` is raised (may be null).
  static absl::StatusOr<std::unique_ptr<NcclGroup>> Join(const std::string& unique_id, int size,
                                                         const std::vector<Member>& members,
                                                         absl::Time deadline,
                                                         const Interrupt* interrupt = nullptr);
  ~NcclGroup();
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;

  // One message of a step: device memory of member `member` (an index into the members
  // given to Join) sent to or received from communicator rank `peer`.
  struct Message {
    int member = 0;
    bool send = false;
    int peer = 0;
    void* device_buffer = nullptr;
    int64_t bytes = 0;
  };
  // Issues `messages` in one ncclGroupStart/End and waits for them on the members'
  // streams. At the deadline, or on an error, aborts every communicator and says which.
  absl::Status RunStep(const std::vector<Message>& messages, absl::Time deadline);

  // While `interrupt` is raised, RunStep's wait ends at once (CANCELLED) and the group is
  // aborted: what the coordinator's abort and SIGTERM raise. Null: never interrupted.
  void SetInterrupt(const Interrupt* interrupt) { interrupt_ = interrupt; }

  bool aborted() const { return aborted_; }
  int size() const { return size_; }

 private:
  struct Handles;
  NcclGroup(std::unique_ptr<Handles> handles, int size);
  void Abort();

  std::unique_ptr<Handles> handles_;
  int size_;
  bool aborted_ = false;
  const Interrupt* interrupt_ = nullptr;
};

}  // namespace refit::transport::gpu

#endif  // REFIT_TRANSPORT_GPU_NCCL_GROUP_H_

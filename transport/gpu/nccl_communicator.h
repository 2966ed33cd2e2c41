// One GPU's membership in a refit group's NCCL communicator. The coordinator hands every
// daemon the same unique id (NewUniqueId); each daemon joins with its GPUs' ranks. Joining
// and every group of sends and receives end by a deadline: a failure or timeout aborts the
// communicator (ncclCommAbort), so a dead peer never hangs an epoch, and the communicator
// must be joined again. Without CUDA in the build every call is UNIMPLEMENTED.
#ifndef REFIT_TRANSPORT_GPU_NCCL_COMMUNICATOR_H_
#define REFIT_TRANSPORT_GPU_NCCL_COMMUNICATOR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace refit::transport::gpu {

class NcclCommunicator {
 public:
  // A new ncclUniqueId, as bytes to hand out.
  static absl::StatusOr<std::string> NewUniqueId();

  // Joins as `rank` of `size` on CUDA device `device`.
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Join(const std::string& unique_id,
                                                                int size, int rank, int device,
                                                                absl::Time deadline);
  ~NcclCommunicator();
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  // One message of a group: device memory sent to or received from `peer`.
  struct Message {
    bool send = false;
    int peer = 0;
    void* device_buffer = nullptr;
    int64_t bytes = 0;
  };
  // Issues `messages` in one ncclGroupStart/End on this GPU's stream and waits for them.
  // At the deadline, or on an NCCL error, aborts the communicator and says which.
  absl::Status RunGroup(const std::vector<Message>& messages, absl::Time deadline);

  bool aborted() const { return aborted_; }
  int rank() const { return rank_; }
  int size() const { return size_; }

 private:
  struct Handles;
  NcclCommunicator(std::unique_ptr<Handles> handles, int size, int rank, int device);
  void Abort();

  std::unique_ptr<Handles> handles_;
  int size_;
  int rank_;
  int device_;
  bool aborted_ = false;
};

}  // namespace refit::transport::gpu

#endif  // REFIT_TRANSPORT_GPU_NCCL_COMMUNICATOR_H_

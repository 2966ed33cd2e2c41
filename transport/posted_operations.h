// The UCX operations one batch has posted and not yet finished (PlanExecutor::RunBatch), in
// the lists the batch waits on, owned in one place. The batch waits for a list when its
// stage is done with it (Wait); whatever is still posted when the batch ends, by an error
// or otherwise, is cancelled by the destructor, the only place that gives up on
// operations, so no operation outlives the buffers it reads or writes. An operation UCX
// could neither finish nor cancel keeps its staging block alive (its memory_owner): the
// pool then forgets that block (StagingPool::Abandon), so no later batch reuses it.
//
// Threading: one batch's thread (the epoch's).
#ifndef REFIT_TRANSPORT_POSTED_OPERATIONS_H_
#define REFIT_TRANSPORT_POSTED_OPERATIONS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "transport/staging_pool.h"
#include "transport/ucx_worker.h"

namespace refit::transport {

class PostedOperations {
 public:
  // `worker` may be null for a batch that posts nothing; `staging` is the host staging the
  // batch carves its slots from; errors name `batch`.
  PostedOperations(UcxWorker* worker, StagingPool* staging, int32_t batch, absl::Time deadline,
                   absl::Duration stall_limit)
      : worker_(worker),
        staging_(staging),
        batch_(batch),
        deadline_(deadline),
        stall_limit_(stall_limit) {}
  // Cancels every operation still posted.
  ~PostedOperations();
  PostedOperations(const PostedOperations&) = delete;
  PostedOperations& operator=(const PostedOperations&) = delete;

  // A round's sends and receives, by the round's parity.
  std::vector<PendingOperation> rounds[2];
  // Through shared memory: the receipts a sender awaits, by round parity, and those it sent.
  std::vector<PendingOperation> receipts_awaited[2];
  std::vector<PendingOperation> receipts_sent;
  // Words of straight writes: received from same-host peers, and sent to them.
  std::vector<PendingOperation> words_received;
  std::vector<PendingOperation> words_sent;

  // Waits for the operations of `list` (one of the above; emptied either way) within the
  // deadline and the stall limit; errors name the batch.
  absl::Status Wait(std::vector<PendingOperation>* list);
  // Waits for every list.
  absl::Status WaitForAll();

 private:
  // Every list, in the order a batch that went well drains them.
  std::vector<std::vector<PendingOperation>*> Lists();
  // Forgets the staging block when the last wait left an operation running.
  void AbandonIfLeftRunning(size_t lingering, int64_t abandoned);

  UcxWorker* worker_;
  StagingPool* staging_;
  int32_t batch_;
  absl::Time deadline_;
  absl::Duration stall_limit_;
};

}  // namespace refit::transport

#endif  // REFIT_TRANSPORT_POSTED_OPERATIONS_H_

// refitd's place in the NCCL group of the refit: joins the communicator named by a plan
// slice with this daemon's GPUs (once per unique id; again after a failed epoch aborted
// it), says which communicator rank each member GPU and each rank placed on one is, and
// keeps the GPU staging of NCCL messages across epochs (allocating it synchronizes the
// device). Used by the epoch thread only.
#ifndef REFIT_REFITD_NCCL_MEMBERSHIP_H_
#define REFIT_REFITD_NCCL_MEMBERSHIP_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "proto/refit.pb.h"
#include "transport/gpu/nccl_group.h"
#include "transport/interrupt.h"
#include "transport/plan_executor.h"
#include "transport/staging_pool.h"

namespace refit::daemon {

class NcclMembership {
 public:
  // `interrupt` ends a join or a step (the running epoch's abort).
  NcclMembership(std::string node, const transport::Interrupt* interrupt)
      : node_(std::move(node)), interrupt_(interrupt) {}

  // Fills `route` for `slice`'s NCCL setup: the communicator ranks (as every daemon numbers
  // them), this daemon's GPUs among them, and the group when one of them is a member
  // (joined by `deadline`). A slice none of whose members is here joins nothing.
  absl::Status Join(const v1::PlanSlice& slice, absl::Time deadline, transport::NcclRoute* route);
  transport::StagingPool* device_staging() { return &device_staging_; }
  void Leave() { group_.reset(); }

 private:
  const std::string node_;
  const transport::Interrupt* interrupt_;
  std::unique_ptr<transport::gpu::NcclGroup> group_;
  std::string unique_id_;  // the group's
  transport::StagingPool device_staging_{transport::DeviceStagingAllocator()};
};

}  // namespace refit::daemon

#endif  // REFIT_REFITD_NCCL_MEMBERSHIP_H_

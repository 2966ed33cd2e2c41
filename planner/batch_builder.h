// Places transfers into batches one at a time, as they are made: in each batch no rank
// sends, nor receives, more than the staging budget over the network, and no rank spends
// longer on NVLink or local copies than that budget takes on its NIC (those bytes count
// scaled by the bandwidth ratio). A transfer that forwards data lands in a later batch than
// the transfer that delivered it. Lowest-fitting batch first, so every link stays busy from
// the start.
#ifndef REFIT_PLANNER_BATCH_BUILDER_H_
#define REFIT_PLANNER_BATCH_BUILDER_H_

#include <cstdint>
#include <vector>

#include "planner/plan.h"
#include "planner/topology.h"

namespace refit::planner {

class BatchBuilder {
 public:
  BatchBuilder(int32_t num_source_ranks, int32_t num_destination_ranks, int64_t budget_bytes,
               const Bandwidths& bandwidths);

  // The batch of a transfer of `bytes`, placed after every transfer placed before it: the
  // lowest that fits at or after `earliest` (the batch after the one that brought the
  // bytes a forward sends).
  // Past kMaxBatches nothing is placed: the batch returned is kMaxBatches and overflowed()
  // says so (the plan must then be refused).
  int32_t Place(const Transfer& transfer, int64_t bytes, int32_t earliest);
  bool overflowed() const { return overflowed_; }

 private:
  // Sending and receiving have separate slots (a NIC is full duplex), and so have the
  // network and NVLink or local copies (separate links, priced separately).
  int32_t SlotOf(const Endpoint& endpoint, bool receiving, bool network) const;
  // Budget charge of a transfer: network bytes count fully, others by bandwidth ratio.
  int64_t ChargeOf(const Transfer& transfer, int64_t bytes) const;
  bool Fits(int32_t slot, int32_t batch, int64_t bytes) const;
  void Take(int32_t slot, int32_t batch, int64_t bytes);

  int32_t num_source_ranks_;
  int32_t num_ranks_;
  int64_t budget_bytes_;
  double nvlink_scale_;
  double local_scale_;
  std::vector<std::vector<int64_t>> usage_;  // per rank slot, bytes per batch
  std::vector<int32_t> first_open_;          // per rank slot, lowest batch not yet full
  bool overflowed_ = false;
};

}  // namespace refit::planner

#endif  // REFIT_PLANNER_BATCH_BUILDER_H_

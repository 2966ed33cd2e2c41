// Cuts a list of transfers into batches: in each batch no rank sends or receives more than
// the staging budget, and a transfer that forwards data lands in a later batch than the
// transfer that delivered it. Lowest-fitting batch first, so every link stays busy early.
#ifndef REFIT_PLANNER_BATCH_BUILDER_H_
#define REFIT_PLANNER_BATCH_BUILDER_H_

#include <cstdint>
#include <vector>

#include "planner/plan.h"

namespace refit::planner {

class BatchBuilder {
 public:
  BatchBuilder(int32_t num_source_ranks, int32_t num_destination_ranks, int64_t budget_bytes);

  // Sets transfer.batch for every transfer, in list order. depends_on[i] is -1 or an
  // earlier transfer index whose batch transfer i must follow. Returns the batch count.
  int32_t Assign(std::vector<Transfer>* transfers, const std::vector<int32_t>& depends_on);

 private:
  int32_t SlotOf(const Endpoint& endpoint) const;
  bool Fits(int32_t slot, int32_t batch, int64_t bytes) const;
  void Take(int32_t slot, int32_t batch, int64_t bytes);

  int32_t num_source_ranks_;
  int64_t budget_bytes_;
  std::vector<std::vector<int64_t>> usage_;  // per rank slot, bytes per batch
  std::vector<int32_t> first_open_;          // per rank slot, lowest batch not yet full
};

}  // namespace refit::planner

#endif  // REFIT_PLANNER_BATCH_BUILDER_H_

#include "planner/batch_builder.h"

#include <algorithm>

namespace refit::planner {

BatchBuilder::BatchBuilder(int32_t num_source_ranks, int32_t num_destination_ranks,
                           int64_t budget_bytes)
    : num_source_ranks_(num_source_ranks),
      budget_bytes_(std::max<int64_t>(1, budget_bytes)),
      usage_(num_source_ranks + num_destination_ranks),
      first_open_(num_source_ranks + num_destination_ranks, 0) {}

int32_t BatchBuilder::SlotOf(const Endpoint& endpoint) const {
  return endpoint.IsSourceSide() ? endpoint.rank_index : num_source_ranks_ + endpoint.rank_index;
}

bool BatchBuilder::Fits(int32_t slot, int32_t batch, int64_t bytes) const {
  const std::vector<int64_t>& usage = usage_[slot];
  if (batch >= static_cast<int32_t>(usage.size())) return true;
  // An empty batch takes anything, so an oversized transfer still gets one.
  return usage[batch] == 0 || usage[batch] + bytes <= budget_bytes_;
}

void BatchBuilder::Take(int32_t slot, int32_t batch, int64_t bytes) {
  std::vector<int64_t>& usage = usage_[slot];
  if (batch >= static_cast<int32_t>(usage.size())) usage.resize(batch + 1, 0);
  usage[batch] += bytes;
  // A batch with less than 1/64 of the budget left is closed for the search start.
  int32_t& open = first_open_[slot];
  while (open < static_cast<int32_t>(usage.size()) &&
         usage[open] >= budget_bytes_ - budget_bytes_ / 64) {
    ++open;
  }
}

int32_t BatchBuilder::Assign(std::vector<Transfer>* transfers,
                             const std::vector<int32_t>& depends_on) {
  int32_t num_batches = 0;
  for (size_t i = 0; i < transfers->size(); ++i) {
    Transfer& transfer = (*transfers)[i];
    const int32_t src = SlotOf(transfer.src), dst = SlotOf(transfer.dst);
    int32_t batch = std::max(first_open_[src], first_open_[dst]);
    if (depends_on[i] >= 0) batch = std::max(batch, (*transfers)[depends_on[i]].batch + 1);
    while (!Fits(src, batch, transfer.bytes) || !Fits(dst, batch, transfer.bytes)) ++batch;
    Take(src, batch, transfer.bytes);
    if (dst != src) Take(dst, batch, transfer.bytes);
    transfer.batch = batch;
    num_batches = std::max(num_batches, batch + 1);
  }
  return num_batches;
}

}  // namespace refit::planner

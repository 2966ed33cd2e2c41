#include "planner/batch_builder.h"

#include <algorithm>

namespace refit::planner {

BatchBuilder::BatchBuilder(int32_t num_source_ranks, int32_t num_destination_ranks,
                           int64_t budget_bytes, const Bandwidths& bandwidths)
    : num_source_ranks_(num_source_ranks),
      num_ranks_(num_source_ranks + num_destination_ranks),
      budget_bytes_(std::max<int64_t>(1, budget_bytes)),
      nvlink_scale_(bandwidths.nic_bytes_per_s / bandwidths.nvlink_bytes_per_s),
      local_scale_(bandwidths.nic_bytes_per_s / bandwidths.local_copy_bytes_per_s),
      usage_(4 * num_ranks_),
      first_open_(4 * num_ranks_, 0) {}

int32_t BatchBuilder::SlotOf(const Endpoint& endpoint, bool receiving, bool network) const {
  const int32_t rank =
      endpoint.IsSourceSide() ? endpoint.rank_index : num_source_ranks_ + endpoint.rank_index;
  return (network ? 0 : 2 * num_ranks_) + (receiving ? num_ranks_ : 0) + rank;
}

int64_t BatchBuilder::ChargeOf(const Transfer& transfer, int64_t bytes) const {
  switch (transfer.route) {
    case v1::ROUTE_NETWORK:
      return bytes;
    case v1::ROUTE_NVLINK:
      return static_cast<int64_t>(bytes * nvlink_scale_) + 1;
    default:
      return static_cast<int64_t>(bytes * local_scale_) + 1;
  }
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

int32_t BatchBuilder::Place(const Transfer& transfer, int64_t bytes, int32_t earliest) {
  const bool network = transfer.route == v1::ROUTE_NETWORK;
  const int32_t src = SlotOf(transfer.src, false, network);
  const int32_t dst = SlotOf(transfer.dst, true, network);
  const int64_t charge = ChargeOf(transfer, bytes);
  int32_t batch = std::max({first_open_[src], first_open_[dst], earliest});
  while (!Fits(src, batch, charge) || !Fits(dst, batch, charge)) ++batch;
  if (batch > kMaxBatches) {
    overflowed_ = true;
    return kMaxBatches;
  }
  Take(src, batch, charge);
  Take(dst, batch, charge);
  return batch;
}

}  // namespace refit::planner

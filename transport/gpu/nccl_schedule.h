// The NCCL side of the GPU data plane as arithmetic, so it is checked on CPU: which rank
// of the refit group's communicator each GPU is, and the ncclSend/ncclRecv calls each GPU
// issues. Transfers between GPUs of different hosts go over NCCL (within a host, CUDA IPC
// copies them). Per step (a batch; for ordered plans, one transfer's sequence number),
// every piece one GPU sends another is packed into one message, and the GPU issues, in one
// ncclGroupStart/End, for each peer in ascending rank order its send and then its
// receive. A group completes only if every peer issues the matching calls: same pairs,
// same sizes, same order. CheckSchedules proves that for a set of schedules built
// independently, daemon by daemon, from their own plan slices.
#ifndef REFIT_TRANSPORT_GPU_NCCL_SCHEDULE_H_
#define REFIT_TRANSPORT_GPU_NCCL_SCHEDULE_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/refit.pb.h"

namespace refit::transport::gpu {

struct NcclCall {
  bool send = false;
  int32_t peer = 0;
  int64_t bytes = 0;
  bool operator==(const NcclCall& o) const {
    return send == o.send && peer == o.peer && bytes == o.bytes;
  }
};

// Communicator ranks: one per distinct (host, device) of both layouts, in that order, so
// every daemon derives the same numbering from the same layouts.
class CommunicatorRanks {
 public:
  static CommunicatorRanks FromLayouts(const v1::LayoutSpec& sources,
                                       const v1::LayoutSpec& destinations);
  absl::StatusOr<int32_t> Of(v1::Role role, int64_t rank) const;
  const std::string& HostOf(int32_t communicator_rank) const {
    return gpus_[communicator_rank].first;
  }
  int32_t size() const { return static_cast<int32_t>(gpus_.size()); }
  // The communicator ranks of one host's GPUs.
  std::set<int32_t> OnHost(const std::string& host) const;

 private:
  std::vector<std::pair<std::string, int32_t>> gpus_;  // by communicator rank
  std::map<std::pair<int, int64_t>, int32_t> of_;      // (role, rank) -> rank
};

// One GPU's calls: step -> calls in issue order.
using GpuSchedule = std::map<int64_t, std::vector<NcclCall>>;

// The schedules of the GPUs in `gpus` (those a daemon serves) for `slice`, that daemon's
// part of the plan. Keyed by communicator rank.
absl::StatusOr<std::map<int32_t, GpuSchedule>> ScheduleSlice(const v1::Plan& slice,
                                                             const CommunicatorRanks& ranks,
                                                             const std::set<int32_t>& gpus);

// OK when in every step each GPU's calls to each peer mirror that peer's calls back;
// otherwise names the step, the two GPUs and what differs.
absl::Status CheckSchedules(const std::map<int32_t, GpuSchedule>& schedules,
                            const CommunicatorRanks& ranks);

}  // namespace refit::transport::gpu

#endif  // REFIT_TRANSPORT_GPU_NCCL_SCHEDULE_H_

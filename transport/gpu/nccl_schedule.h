// The NCCL side of the GPU data plane as arithmetic, so it is checked on CPU: which rank
// of the refit group's communicator each GPU is, and the ncclSend/ncclRecv calls each GPU
// issues. Transfers between GPUs of different daemons go over NCCL (within a daemon, CUDA
// IPC copies them). Per step (a batch; for ordered plans, one transfer's sequence number),
// every piece one GPU sends another is packed into one message, and each GPU issues, in
// one ncclGroupStart/End, for each peer in ascending rank order its send and then its
// receive. A group completes only if every peer issues the matching calls: same pairs,
// same sizes, same order.
//
// The data plane (PlanExecutor) issues exactly the messages ScheduleStep returns, and
// ScheduleSlice is ScheduleStep over a slice's steps, so CheckSchedules, given the
// schedules every daemon builds from its own slice, proves what runs.
#ifndef REFIT_TRANSPORT_GPU_NCCL_SCHEDULE_H_
#define REFIT_TRANSPORT_GPU_NCCL_SCHEDULE_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "google/protobuf/repeated_ptr_field.h"
#include "proto/refit.pb.h"
#include "transport/gpu/nccl_members.h"
#include "transport/rank_key.h"

namespace refit::transport::gpu {

struct NcclCall {
  bool send = false;
  int32_t peer = 0;
  int64_t bytes = 0;
  bool operator==(const NcclCall& o) const {
    return send == o.send && peer == o.peer && bytes == o.bytes;
  }
};

// Communicator ranks: the NcclSetup's members (one per (daemon, device), in the
// coordinator's order, see NcclMembers), and which of them each rank placed on a GPU is.
// Every daemon derives the same numbering from the same slice fields.
class CommunicatorRanks {
 public:
  static CommunicatorRanks FromSetup(
      const v1::NcclSetup& setup,
      const google::protobuf::RepeatedPtrField<v1::RankPlacement>& placement);

  // The communicator ranks (sender, receiver) of `t` when it goes over NCCL: both of its
  // endpoints in GPU memory (InGpuMemory) of member GPUs of different daemons. nullopt
  // otherwise (a copy within a daemon, or host memory on either side, scratch included,
  // which UCX carries).
  std::optional<std::pair<int32_t, int32_t>> PairOf(const v1::Transfer& t) const;

  int32_t DaemonOf(int32_t communicator_rank) const { return members_[communicator_rank].first; }
  int32_t DeviceOf(int32_t communicator_rank) const { return members_[communicator_rank].second; }
  int32_t size() const { return static_cast<int32_t>(members_.size()); }
  // The communicator ranks of one daemon's GPUs.
  std::set<int32_t> OfDaemon(int32_t daemon) const;

 private:
  std::vector<std::pair<int32_t, int32_t>> members_;  // (daemon, device) by communicator rank
  std::map<RankKey, int32_t> of_;                     // GPU-placed rank -> communicator rank
};

// One message of a step: what GPU `gpu` (a communicator rank) sends to or receives from
// `call.peer`, `pieces` packed densely in plan order (call.bytes is the sum of their bytes).
struct NcclMessage {
  int32_t gpu = 0;
  NcclCall call;
  std::vector<const v1::Transfer*> pieces;
};

// One step's messages for the GPUs in `gpus` (those a daemon serves), from the step's
// transfers in plan order, in issue order: by GPU, then by peer ascending, the send
// before the receive. Transfers not over NCCL, or touching none of `gpus`, are left out.
std::vector<NcclMessage> ScheduleStep(const std::vector<const v1::Transfer*>& transfers,
                                      const CommunicatorRanks& ranks,
                                      const std::set<int32_t>& gpus);

// One GPU's calls: step -> calls in issue order.
using GpuSchedule = std::map<int64_t, std::vector<NcclCall>>;

// The schedules of the GPUs in `gpus` for `slice`, that daemon's part of the plan: its
// steps through ScheduleStep, as the data plane runs them. Keyed by communicator rank.
std::map<int32_t, GpuSchedule> ScheduleSlice(const v1::Plan& slice, const CommunicatorRanks& ranks,
                                             const std::set<int32_t>& gpus);

// OK when in every step each GPU's calls to each peer mirror that peer's calls back;
// otherwise names the step, the two GPUs and what differs.
absl::Status CheckSchedules(const std::map<int32_t, GpuSchedule>& schedules,
                            const CommunicatorRanks& ranks);

}  // namespace refit::transport::gpu

#endif  // REFIT_TRANSPORT_GPU_NCCL_SCHEDULE_H_

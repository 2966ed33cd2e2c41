#include "transport/gpu/nccl_schedule.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace refit::transport::gpu {
namespace {

std::string Gpu(const CommunicatorRanks& ranks, int32_t gpu) {
  return absl::StrCat("GPU ", gpu, " (daemon ", ranks.DaemonOf(gpu), ", device ",
                      ranks.DeviceOf(gpu), ")");
}

std::string Sizes(const std::vector<int64_t>& sizes) {
  return sizes.empty() ? "nothing" : absl::StrCat("[", absl::StrJoin(sizes, ", "), "] bytes");
}

}  // namespace

CommunicatorRanks CommunicatorRanks::FromSetup(
    const v1::NcclSetup& setup,
    const google::protobuf::RepeatedPtrField<v1::RankPlacement>& placement) {
  CommunicatorRanks ranks;
  std::map<std::pair<int32_t, int32_t>, int32_t> index;
  for (const v1::NcclMember& member : setup.members()) {
    index.emplace(std::pair{member.daemon(), member.device()}, ranks.size());
    ranks.members_.push_back({member.daemon(), member.device()});
  }
  for (const v1::RankPlacement& p : placement) {
    if (!p.gpu()) continue;
    auto it = index.find({p.daemon(), p.device()});
    if (it != index.end()) ranks.of_[RankKey{p.role(), p.rank()}] = it->second;
  }
  return ranks;
}

std::optional<std::pair<int32_t, int32_t>> CommunicatorRanks::PairOf(const v1::Transfer& t) const {
  if (!InGpuMemory(t.src().kind()) || !InGpuMemory(t.dst().kind())) return std::nullopt;
  auto from = of_.find(RankKey{EndpointRole(t.src().kind()), t.src().rank()});
  auto to = of_.find(RankKey{EndpointRole(t.dst().kind()), t.dst().rank()});
  if (from == of_.end() || to == of_.end()) return std::nullopt;
  if (DaemonOf(from->second) == DaemonOf(to->second)) return std::nullopt;  // CUDA IPC
  return std::pair{from->second, to->second};
}

std::set<int32_t> CommunicatorRanks::OfDaemon(int32_t daemon) const {
  std::set<int32_t> out;
  for (int32_t g = 0; g < size(); ++g) {
    if (members_[g].first == daemon) out.insert(g);
  }
  return out;
}

std::vector<NcclMessage> ScheduleStep(const std::vector<const v1::Transfer*>& transfers,
                                      const CommunicatorRanks& ranks,
                                      const std::set<int32_t>& gpus) {
  // (sender, receiver) -> the pieces between them, plan order.
  std::map<std::pair<int32_t, int32_t>, std::vector<const v1::Transfer*>> pairs;
  for (const v1::Transfer* t : transfers) {
    std::optional<std::pair<int32_t, int32_t>> pair = ranks.PairOf(*t);
    if (!pair.has_value() || (!gpus.count(pair->first) && !gpus.count(pair->second))) continue;
    pairs[*pair].push_back(t);
  }
  // gpu -> (peer, receive?) -> pieces: sends sort before receives to the same peer.
  std::map<int32_t, std::map<std::pair<int32_t, bool>, const std::vector<const v1::Transfer*>*>>
      by_gpu;
  for (const auto& [pair, pieces] : pairs) {
    if (gpus.count(pair.first)) by_gpu[pair.first][{pair.second, false}] = &pieces;
    if (gpus.count(pair.second)) by_gpu[pair.second][{pair.first, true}] = &pieces;
  }
  std::vector<NcclMessage> messages;
  for (const auto& [gpu, calls] : by_gpu) {
    for (const auto& [peer_and_receive, pieces] : calls) {
      int64_t bytes = 0;
      for (const v1::Transfer* t : *pieces) bytes += t->bytes();
      messages.push_back(NcclMessage{
          gpu, NcclCall{!peer_and_receive.second, peer_and_receive.first, bytes}, *pieces});
    }
  }
  return messages;
}

std::map<int32_t, GpuSchedule> ScheduleSlice(const v1::Plan& slice, const CommunicatorRanks& ranks,
                                             const std::set<int32_t>& gpus) {
  // step -> its transfers, as the data plane groups them: a batch, or for ordered plans
  // one transfer.
  std::map<int64_t, std::vector<const v1::Transfer*>> steps;
  for (int b = 0; b < slice.batches_size(); ++b) {
    for (const v1::Transfer& t : slice.batches(b).transfers()) {
      steps[slice.ordered_batches() ? t.sequence() : b].push_back(&t);
    }
  }
  std::map<int32_t, GpuSchedule> schedules;
  for (int32_t gpu : gpus) schedules[gpu];
  for (const auto& [step, transfers] : steps) {
    for (NcclMessage& message : ScheduleStep(transfers, ranks, gpus)) {
      schedules[message.gpu][step].push_back(message.call);
    }
  }
  return schedules;
}

absl::Status CheckSchedules(const std::map<int32_t, GpuSchedule>& schedules,
                            const CommunicatorRanks& ranks) {
  // What `gpu` sends to (send = true) or receives from `peer` in `step`, in issue order.
  auto sizes = [&](int32_t gpu, int64_t step, int32_t peer, bool send) {
    std::vector<int64_t> out;
    auto schedule = schedules.find(gpu);
    if (schedule == schedules.end()) return out;
    auto calls = schedule->second.find(step);
    if (calls == schedule->second.end()) return out;
    for (const NcclCall& call : calls->second) {
      if (call.peer == peer && call.send == send) out.push_back(call.bytes);
    }
    return out;
  };
  for (const auto& [gpu, schedule] : schedules) {
    for (const auto& [step, calls] : schedule) {
      std::set<int32_t> peers;
      for (const NcclCall& call : calls) peers.insert(call.peer);
      for (int32_t peer : peers) {
        for (bool send : {true, false}) {
          const std::vector<int64_t> mine = sizes(gpu, step, peer, send);
          const std::vector<int64_t> theirs = sizes(peer, step, gpu, !send);
          if (mine == theirs) continue;
          return absl::FailedPreconditionError(
              absl::StrCat("step ", step, ": ", Gpu(ranks, gpu), send ? " sends " : " receives ",
                           Sizes(mine), send ? " to " : " from ", Gpu(ranks, peer), ", which ",
                           send ? "receives " : "sends ", Sizes(theirs)));
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace refit::transport::gpu

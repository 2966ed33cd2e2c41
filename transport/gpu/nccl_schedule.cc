#include "transport/gpu/nccl_schedule.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "transport/plan_executor.h"

namespace refit::transport::gpu {
namespace {

std::string Gpu(const CommunicatorRanks& ranks, int32_t gpu) {
  return absl::StrCat("GPU ", gpu, " (", ranks.HostOf(gpu), ")");
}

std::string Sizes(const std::vector<int64_t>& sizes) {
  return sizes.empty() ? "nothing" : absl::StrCat("[", absl::StrJoin(sizes, ", "), "] bytes");
}

}  // namespace

CommunicatorRanks CommunicatorRanks::FromLayouts(const v1::LayoutSpec& sources,
                                                 const v1::LayoutSpec& destinations) {
  std::map<std::pair<std::string, int32_t>, std::vector<std::pair<int, int64_t>>> by_gpu;
  for (auto [spec, role] :
       {std::pair{&sources, v1::ROLE_SOURCE}, std::pair{&destinations, v1::ROLE_DESTINATION}}) {
    for (const v1::RankLayout& r : spec->ranks()) {
      by_gpu[{r.host(), r.device()}].push_back({role, r.rank()});
    }
  }
  CommunicatorRanks ranks;
  for (const auto& [gpu, members] : by_gpu) {
    const int32_t index = static_cast<int32_t>(ranks.gpus_.size());
    ranks.gpus_.push_back(gpu);
    for (const auto& member : members) ranks.of_[member] = index;
  }
  return ranks;
}

absl::StatusOr<int32_t> CommunicatorRanks::Of(v1::Role role, int64_t rank) const {
  auto it = of_.find({role, rank});
  if (it == of_.end()) {
    return absl::NotFoundError(absl::StrCat(role == v1::ROLE_SOURCE ? "source" : "destination",
                                            " rank ", rank, " has no GPU in the communicator"));
  }
  return it->second;
}

std::set<int32_t> CommunicatorRanks::OnHost(const std::string& host) const {
  std::set<int32_t> out;
  for (int32_t g = 0; g < size(); ++g) {
    if (gpus_[g].first == host) out.insert(g);
  }
  return out;
}

absl::StatusOr<std::map<int32_t, GpuSchedule>> ScheduleSlice(const v1::Plan& slice,
                                                             const CommunicatorRanks& ranks,
                                                             const std::set<int32_t>& gpus) {
  // step -> (sender, receiver) -> bytes, for the pairs that cross hosts.
  std::map<int64_t, std::map<std::pair<int32_t, int32_t>, int64_t>> messages;
  for (int b = 0; b < slice.batches_size(); ++b) {
    for (const v1::Transfer& t : slice.batches(b).transfers()) {
      absl::StatusOr<int32_t> from = ranks.Of(EndpointRole(t.src().kind()), t.src().rank());
      if (!from.ok()) return from.status();
      absl::StatusOr<int32_t> to = ranks.Of(EndpointRole(t.dst().kind()), t.dst().rank());
      if (!to.ok()) return to.status();
      if (ranks.HostOf(*from) == ranks.HostOf(*to)) continue;  // CUDA IPC, not NCCL
      if (!gpus.count(*from) && !gpus.count(*to)) continue;
      const int64_t step = slice.ordered_batches() ? t.sequence() : b;
      messages[step][{*from, *to}] += t.bytes();
    }
  }
  std::map<int32_t, GpuSchedule> schedules;
  for (int32_t gpu : gpus) schedules[gpu];
  for (const auto& [step, pairs] : messages) {
    for (int32_t gpu : gpus) {
      std::vector<NcclCall> calls;
      for (int32_t peer = 0; peer < ranks.size(); ++peer) {
        auto send = pairs.find({gpu, peer});
        if (send != pairs.end()) calls.push_back(NcclCall{true, peer, send->second});
        auto receive = pairs.find({peer, gpu});
        if (receive != pairs.end()) calls.push_back(NcclCall{false, peer, receive->second});
      }
      if (!calls.empty()) schedules[gpu][step] = std::move(calls);
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

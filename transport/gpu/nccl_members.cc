#include "transport/gpu/nccl_members.h"

#include <map>
#include <set>
#include <utility>

#include "transport/rank_key.h"

namespace refit::transport::gpu {

std::optional<v1::NcclSetup> NcclMembers(const std::vector<v1::RankPlacement>& placement,
                                         const v1::Plan& plan) {
  std::map<std::pair<int, int64_t>, const v1::RankPlacement*> where;
  for (const v1::RankPlacement& p : placement) where[{p.role(), p.rank()}] = &p;
  auto placed = [&](const v1::Endpoint& e) -> const v1::RankPlacement* {
    auto it = where.find({EndpointRole(e.kind()), e.rank()});
    return it == where.end() ? nullptr : it->second;
  };
  bool crosses = false;
  for (const v1::Batch& batch : plan.batches()) {
    for (const v1::Transfer& t : batch.transfers()) {
      const v1::RankPlacement* src = placed(t.src());
      const v1::RankPlacement* dst = placed(t.dst());
      crosses = crosses || (src != nullptr && dst != nullptr && src->gpu() && dst->gpu() &&
                            InGpuMemory(t.src().kind()) && InGpuMemory(t.dst().kind()) &&
                            src->daemon() != dst->daemon());
    }
  }
  if (!crosses) return std::nullopt;
  std::set<std::pair<int32_t, int32_t>> gpus;
  for (const v1::RankPlacement& p : placement) {
    if (p.gpu()) gpus.insert({p.daemon(), p.device()});
  }
  v1::NcclSetup setup;
  for (const auto& [daemon, device] : gpus) {
    v1::NcclMember* member = setup.add_members();
    member->set_daemon(daemon);
    member->set_device(device);
  }
  return setup;
}

}  // namespace refit::transport::gpu

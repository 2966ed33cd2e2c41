// Data-plane benchmark of the local backend: the reshard plan of a reference refit (all
// ranks in one refitd) executed between shared-memory segments, against one plain memcpy
// of the same number of bytes, measured side by side in one run.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "planner/dtype.h"
#include "planner/layout.h"
#include "planner/plan_proto.h"
#include "planner/planner.h"
#include "planner/reference_refits.h"
#include "transport/buffer_map.h"
#include "transport/local_executor.h"

namespace refit::transport {
namespace {

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int Run(const std::string& name, int repeats) {
  absl::StatusOr<planner::RefitScenario> scenario = planner::ReferenceRefit(name);
  if (!scenario.ok()) {
    std::fprintf(stderr, "%s\n", scenario.status().ToString().c_str());
    return 2;
  }
  const planner::Layout src = *planner::CompileLayout(scenario->sources, "source");
  const planner::Layout dst = *planner::CompileLayout(scenario->destinations, "destination");
  TensorTable tensors;
  for (const planner::TensorInfo& t : dst.tensors) {
    tensors[t.name] = TensorShape{t.element_bytes, Dims(t.shape.begin(), t.shape.end())};
  }
  // Back every view with its own segment, registered the way ranks will register them.
  std::vector<std::unique_ptr<SharedMemorySegment>> segments;
  BufferMap map(tensors);
  for (auto [layout, spec, role] :
       {std::make_tuple(&src, &scenario->sources, v1::ROLE_SOURCE),
        std::make_tuple(&dst, &scenario->destinations, v1::ROLE_DESTINATION)}) {
    for (int r = 0; r < spec->ranks_size(); ++r) {
      v1::RankLayout rank = spec->ranks(r);
      for (int v = 0; v < rank.views_size(); ++v) {
        const planner::BufferInfo& info =
            layout->ranks[r].buffers[layout->views[layout->ranks[r].views[v]].buffer];
        const std::string shm = absl::StrCat("/refit-bench-", getpid(), "-", segments.size());
        auto segment = SharedMemorySegment::Create(shm, info.bytes);
        if (!segment.ok()) {
          std::fprintf(stderr, "%s\n", segment.status().ToString().c_str());
          return 1;
        }
        std::memset((*segment)->data(), v, info.bytes);
        segments.push_back(std::move(*segment));
        rank.mutable_views(v)->set_buffer(info.name);
        v1::BufferSpec* buffer = rank.add_buffers();
        buffer->set_name(info.name);
        buffer->set_bytes(info.bytes);
        buffer->set_shm_name(shm);
      }
      const absl::Status added = map.AddRank(role, rank);
      if (!added.ok()) {
        std::fprintf(stderr, "%s\n", added.ToString().c_str());
        return 1;
      }
    }
  }
  auto plan = planner::BuildPlan(src, dst, scenario->topology, planner::PlanOptions());
  if (!plan.ok()) return 1;
  const v1::Plan wire = planner::PlanToProto(**plan, src, dst);
  const int64_t bytes = (*plan)->stats.total_bytes;
  std::vector<uint8_t> from(bytes, 1), to(bytes, 0);
  double best_plan = 1e9, best_memcpy = 1e9;
  int64_t runs = 0;
  for (int i = 0; i < repeats; ++i) {
    auto start = std::chrono::steady_clock::now();
    absl::StatusOr<ExecutionStats> stats = ExecuteLocally(wire, map);
    best_plan = std::min(best_plan, Seconds(start));
    if (!stats.ok()) {
      std::fprintf(stderr, "%s\n", stats.status().ToString().c_str());
      return 1;
    }
    runs = stats->runs;
    start = std::chrono::steady_clock::now();
    std::memcpy(to.data(), from.data(), bytes);
    best_memcpy = std::min(best_memcpy, Seconds(start));
  }
  std::printf(
      "%-6s %10.1f MB %8zu transfers %9lld runs | local backend %6.2f GB/s | memcpy %6.2f "
      "GB/s | ratio %.2f\n",
      name.c_str(), bytes / 1e6, (*plan)->transfers.size(), static_cast<long long>(runs),
      bytes / best_plan / 1e9, bytes / best_memcpy / 1e9, best_memcpy / best_plan);
  return 0;
}

}  // namespace
}  // namespace refit::transport

int main(int argc, char** argv) {
  const std::string name = argc > 1 ? argv[1] : "mini";
  return refit::transport::Run(name, 5);
}

// Data-plane benchmark: the reshard plan of a reference refit executed by the plan
// executor between shared-memory segments, measured side by side in one run against
//  - local: every rank in one refitd (the local backend) vs one plain memcpy of the bytes;
//  - ucx: trainer ranks in one refitd, inference ranks in another, over UCX (shared memory
//    or TCP on this machine, whichever UCX picks; UCX_TLS selects) vs one raw UCX message
//    of the same bytes between the same two workers.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "planner/layout.h"
#include "planner/plan_proto.h"
#include "planner/planner.h"
#include "planner/reference_refits.h"
#include "transport/buffer_map.h"
#include "transport/local_executor.h"
#include "transport/plan_executor.h"
#include "transport/ucx_worker.h"

namespace refit::transport {
namespace {

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The ranks of both sides, each view in its own shared-memory segment, registered in
// `map_for(role)`.
class BenchRanks {
 public:
  absl::Status Back(const planner::Layout& layout, const v1::LayoutSpec& spec, v1::Role role,
                    BufferMap* map) {
    for (int r = 0; r < spec.ranks_size(); ++r) {
      v1::RankLayout rank = spec.ranks(r);
      for (int v = 0; v < rank.views_size(); ++v) {
        const planner::BufferInfo& info =
            layout.ranks[r].buffers[layout.views[layout.ranks[r].views[v]].buffer];
        static int64_t next = 0;
        const std::string shm = absl::StrCat("/refit-bench-", getpid(), "-", next++);
        auto segment = SharedMemorySegment::Create(shm, info.bytes);
        if (!segment.ok()) return segment.status();
        std::memset((*segment)->data(), v + 1, info.bytes);
        segments_.push_back(std::move(*segment));
        rank.mutable_views(v)->set_buffer(info.name);
        v1::BufferSpec* buffer = rank.add_buffers();
        buffer->set_name(info.name);
        buffer->set_bytes(info.bytes);
        buffer->set_shm_name(shm);
      }
      absl::Status added = map->AddRank(role, rank);
      if (!added.ok()) return added;
    }
    return absl::OkStatus();
  }

 private:
  std::vector<std::unique_ptr<SharedMemorySegment>> segments_;
};

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "%s\n", status.ToString().c_str());
  return 1;
}

int Run(const std::string& name, int repeats) {
  absl::StatusOr<planner::RefitScenario> scenario = planner::ReferenceRefit(name);
  if (!scenario.ok()) return Fail(scenario.status());
  const planner::Layout src = *planner::CompileLayout(scenario->sources, "source");
  const planner::Layout dst = *planner::CompileLayout(scenario->destinations, "destination");
  TensorTable tensors;
  for (const planner::TensorInfo& t : dst.tensors) {
    tensors[t.name] = TensorShape{t.element_bytes, Dims(t.shape.begin(), t.shape.end())};
  }
  BufferMap both(tensors), trainer(tensors), inference(tensors);
  BenchRanks ranks;
  absl::Status backed = ranks.Back(src, scenario->sources, v1::ROLE_SOURCE, &both);
  if (backed.ok()) backed = ranks.Back(dst, scenario->destinations, v1::ROLE_DESTINATION, &both);
  // The same segments again, split into a trainer daemon and an inference daemon.
  BenchRanks split;
  if (backed.ok()) backed = split.Back(src, scenario->sources, v1::ROLE_SOURCE, &trainer);
  if (backed.ok()) {
    backed = split.Back(dst, scenario->destinations, v1::ROLE_DESTINATION, &inference);
  }
  if (!backed.ok()) return Fail(backed);
  auto plan = planner::BuildPlan(src, dst, scenario->topology, planner::PlanOptions());
  if (!plan.ok()) return Fail(plan.status());
  const v1::Plan wire = planner::PlanToProto(**plan, src, dst);
  const int64_t bytes = (*plan)->stats.total_bytes;

  // Local backend vs memcpy.
  std::vector<uint8_t> from(bytes, 1), to(bytes, 0);
  double best_local = 1e9, best_memcpy = 1e9;
  for (int i = 0; i < repeats; ++i) {
    auto start = std::chrono::steady_clock::now();
    absl::StatusOr<ExecutionStats> stats = ExecuteLocally(wire, &both);
    best_local = std::min(best_local, Seconds(start));
    if (!stats.ok()) return Fail(stats.status());
    start = std::chrono::steady_clock::now();
    std::memcpy(to.data(), from.data(), bytes);
    best_memcpy = std::min(best_memcpy, Seconds(start));
  }

  // Two daemons over UCX vs one raw UCX message of the same bytes.
  RankPlacement placement;
  for (const v1::RankLayout& r : scenario->sources.ranks())
    placement.Place(v1::ROLE_SOURCE, r.rank(), 0);
  for (const v1::RankLayout& r : scenario->destinations.ranks()) {
    placement.Place(v1::ROLE_DESTINATION, r.rank(), 1);
  }
  auto worker0 = UcxWorker::Create("trainer-daemon");
  auto worker1 = UcxWorker::Create("inference-daemon");
  if (!worker0.ok()) return Fail(worker0.status());
  if (!worker1.ok()) return Fail(worker1.status());
  double best_ucx_plan = 1e9, best_ucx_raw = 1e9;
  absl::Status failure;
  std::thread inference_daemon([&]() {
    auto endpoint = (*worker1)->Connect((*worker0)->address());
    if (!endpoint.ok()) {
      failure = endpoint.status();
      return;
    }
    PlanExecutor executor(&inference, placement, 1, worker1->get(), {endpoint->get(), nullptr});
    for (int i = 0; i < repeats; ++i) {
      auto result = executor.Run(wire, 100 + i, absl::Now() + absl::Seconds(120));
      if (!result.ok()) failure = result.status();
      auto got = (*worker1)->Receive(1, to.data(), to.size(), absl::Now() + absl::Seconds(60));
      if (!got.ok()) failure = got.status();
    }
  });
  {
    auto endpoint = (*worker0)->Connect((*worker1)->address());
    if (!endpoint.ok()) return Fail(endpoint.status());
    PlanExecutor executor(&trainer, placement, 0, worker0->get(), {nullptr, endpoint->get()});
    for (int i = 0; i < repeats; ++i) {
      auto start = std::chrono::steady_clock::now();
      auto result = executor.Run(wire, 100 + i, absl::Now() + absl::Seconds(120));
      best_ucx_plan = std::min(best_ucx_plan, Seconds(start));
      if (!result.ok()) failure = result.status();
      start = std::chrono::steady_clock::now();
      absl::Status sent =
          (*endpoint)->Send(1, from.data(), from.size(), absl::Now() + absl::Seconds(60));
      best_ucx_raw = std::min(best_ucx_raw, Seconds(start));
      if (!sent.ok()) failure = sent;
    }
    inference_daemon.join();
  }
  if (!failure.ok()) return Fail(failure);
  std::printf("%s: %.1f MB in %zu transfers, best of %d runs\n", name.c_str(), bytes / 1e6,
              (*plan)->transfers.size(), repeats);
  std::printf("  local backend  %6.2f GB/s | memcpy          %6.2f GB/s | ratio %.2f\n",
              bytes / best_local / 1e9, bytes / best_memcpy / 1e9, best_memcpy / best_local);
  std::printf("  ucx, 2 daemons %6.2f GB/s | raw UCX message %6.2f GB/s | ratio %.2f\n",
              bytes / best_ucx_plan / 1e9, bytes / best_ucx_raw / 1e9,
              best_ucx_raw / best_ucx_plan);
  return 0;
}

}  // namespace
}  // namespace refit::transport

int main(int argc, char** argv) {
  const std::string name = argc > 1 ? argv[1] : "mini";
  return refit::transport::Run(name, 3);
}

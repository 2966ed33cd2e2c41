// Data-plane benchmark: the reshard plan of a reference refit executed by the plan
// executor between shared-memory segments, measured side by side in one run against
//  - local: every rank in one refitd (the local backend) vs one plain memcpy of the bytes;
//  - ucx: trainer ranks in one refitd, inference ranks in another, over UCX (shared memory
//    or TCP on this machine, whichever UCX picks; UCX_TLS selects), timed from both
//    daemons' start to the later one's end, each keeping its host staging across epochs
//    as refitd does; against one raw UCX message of the bytes that cross between the
//    same two workers, timed from send to receipt.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
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

  // Two daemons over UCX vs one raw UCX message of the bytes that cross between them.
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
  // What crosses from the trainer daemon to the inference daemon (the rest of the plan is
  // copies inside one node: replicas of a destination box, relay hops).
  int64_t crossing = 0;
  for (const v1::Batch& batch : wire.batches()) {
    for (const v1::Transfer& t : batch.transfers()) {
      if (EndpointRole(t.src().kind()) == v1::ROLE_SOURCE &&
          EndpointRole(t.dst().kind()) == v1::ROLE_DESTINATION) {
        crossing += t.bytes();
      }
    }
  }
  // Each round starts both daemons together and ends when both are done: the epoch as
  // the coordinator sees it. Then one raw UCX message of the crossing bytes, timed from
  // its send to its receipt.
  std::vector<absl::Notification> epoch_start(repeats), epoch_done(repeats);
  std::vector<absl::Notification> raw_start(repeats), raw_done(repeats);
  double best_ucx_plan = 1e9, best_ucx_raw = 1e9;
  absl::Status trainer_failure, inference_failure;
  std::thread inference_daemon([&]() {
    auto endpoint = (*worker1)->Connect((*worker0)->address());
    if (!endpoint.ok()) inference_failure = endpoint.status();
    PlanExecutor executor(&inference, placement, 1, worker1->get(),
                          {endpoint.ok() ? endpoint->get() : nullptr, nullptr});
    StagingPool staging(HostStagingAllocator());  // kept across epochs, as refitd does
    executor.UseHostStaging(&staging);
    std::vector<uint8_t> received(crossing);
    for (int i = 0; i < repeats; ++i) {
      epoch_start[i].WaitForNotification();
      if (inference_failure.ok()) {
        auto result = executor.Run(wire, 100 + i, absl::Now() + absl::Seconds(120));
        if (!result.ok()) inference_failure = result.status();
      }
      epoch_done[i].Notify();
      raw_start[i].WaitForNotification();
      if (inference_failure.ok()) {
        auto got = (*worker1)->Receive(1, received.data(), received.size(),
                                       absl::Now() + absl::Seconds(60));
        if (!got.ok()) inference_failure = got.status();
      }
      raw_done[i].Notify();
    }
  });
  {
    auto endpoint = (*worker0)->Connect((*worker1)->address());
    if (!endpoint.ok()) trainer_failure = endpoint.status();
    PlanExecutor executor(&trainer, placement, 0, worker0->get(),
                          {nullptr, endpoint.ok() ? endpoint->get() : nullptr});
    StagingPool staging(HostStagingAllocator());
    executor.UseHostStaging(&staging);
    std::vector<uint8_t> message(crossing, 1);
    for (int i = 0; i < repeats; ++i) {
      auto start = std::chrono::steady_clock::now();
      epoch_start[i].Notify();
      if (trainer_failure.ok()) {
        auto result = executor.Run(wire, 100 + i, absl::Now() + absl::Seconds(120));
        if (!result.ok()) trainer_failure = result.status();
      }
      epoch_done[i].WaitForNotification();
      best_ucx_plan = std::min(best_ucx_plan, Seconds(start));
      start = std::chrono::steady_clock::now();
      raw_start[i].Notify();
      if (trainer_failure.ok()) {
        absl::Status sent =
            (*endpoint)->Send(1, message.data(), message.size(), absl::Now() + absl::Seconds(60));
        if (!sent.ok()) trainer_failure = sent;
      }
      raw_done[i].WaitForNotification();
      best_ucx_raw = std::min(best_ucx_raw, Seconds(start));
    }
    inference_daemon.join();
  }
  if (!trainer_failure.ok()) return Fail(trainer_failure);
  if (!inference_failure.ok()) return Fail(inference_failure);
  std::printf("%s: %.1f MB in %zu transfers, best of %d runs\n", name.c_str(), bytes / 1e6,
              (*plan)->transfers.size(), repeats);
  std::printf("  local backend  %6.2f GB/s | memcpy          %6.2f GB/s | ratio %.2f\n",
              bytes / best_local / 1e9, bytes / best_memcpy / 1e9, best_memcpy / best_local);
  std::printf(
      "  ucx, 2 daemons: epoch %.3f s, both sides (%.2f GB/s of the plan's bytes); the %.1f MB "
      "between "
      "the daemons %.2f GB/s | raw UCX message of those bytes %.2f GB/s | ratio %.2f\n",
      best_ucx_plan, bytes / best_ucx_plan / 1e9, crossing / 1e6, crossing / best_ucx_plan / 1e9,
      crossing / best_ucx_raw / 1e9, best_ucx_raw / best_ucx_plan);
  return 0;
}

}  // namespace
}  // namespace refit::transport

int main(int argc, char** argv) {
  const std::string name = argc > 1 ? argv[1] : "mini";
  return refit::transport::Run(name, 3);
}

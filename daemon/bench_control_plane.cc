// Control-plane benchmark: one coordinator and N refitd daemons in one process (each with
// its own registry, control stream and UCX worker), one source and one destination rank
// per daemon holding one element each, so a refit moves almost nothing and its latency is
// the control plane's: publish -> Refit -> plan slices and execute to every daemon ->
// reports -> commit. Prints p50 and p99 over many epochs.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/daemon_clients.h"
#include "daemon/coordinator_link.h"
#include "daemon/coordinator_server.h"
#include "spdlog/spdlog.h"
#include "transport/shared_memory.h"

namespace refit::daemon {
namespace {

v1::RegisterRankRequest OneElementRank(v1::Role role, int64_t rank, int64_t ranks,
                                       const std::string& shm) {
  v1::RegisterRankRequest request;
  request.set_role(role);
  v1::TensorSpec* tensor = request.add_tensors();
  tensor->set_name("w");
  tensor->set_dtype("F32");
  tensor->add_shape(ranks);
  v1::RankLayout* layout = request.mutable_layout();
  layout->set_rank(rank);
  layout->set_host(absl::StrCat("node-", rank));
  v1::ShardView* view = layout->add_views();
  view->set_tensor("w");
  view->add_offset(rank);
  view->add_extent(1);
  view->set_buffer("w");
  v1::BufferSpec* buffer = layout->add_buffers();
  buffer->set_name("w");
  buffer->set_bytes(4);
  buffer->set_shm_name(shm);
  return request;
}

int Run(int daemons, int epochs) {
  spdlog::set_level(spdlog::level::warn);
  v1::JobSpec job;
  job.set_name("bench");
  job.set_source_ranks(daemons);
  job.set_destination_ranks(daemons);
  absl::StatusOr<std::unique_ptr<CoordinatorServer>> coordinator =
      CoordinatorServer::Start("127.0.0.1:0", job, absl::Seconds(30));
  if (!coordinator.ok()) {
    std::fprintf(stderr, "%s\n", coordinator.status().ToString().c_str());
    return 1;
  }
  const std::string address = (*coordinator)->address();
  Cluster& cluster = (*coordinator)->cluster();

  std::vector<std::unique_ptr<transport::SharedMemorySegment>> segments;
  std::vector<std::unique_ptr<RankRegistry>> registries;
  std::vector<std::unique_ptr<CoordinatorLink>> links;
  for (int d = 0; d < daemons; ++d) {
    registries.push_back(std::make_unique<RankRegistry>(absl::StrCat("node-", d)));
    links.push_back(std::make_unique<CoordinatorLink>(address, absl::StrCat("node-", d),
                                                      registries.back().get()));
    links.back()->Start();
    for (v1::Role role : {v1::ROLE_SOURCE, v1::ROLE_DESTINATION}) {
      const std::string shm = absl::StrCat("/refit-cpbench-", getpid(), "-", segments.size());
      auto segment = transport::SharedMemorySegment::Create(shm, 4);
      if (!segment.ok()) return 1;
      segments.push_back(std::move(*segment));
      absl::StatusOr<std::string> session =
          registries.back()->Register(OneElementRank(role, d, daemons, shm));
      if (!session.ok()) {
        std::fprintf(stderr, "%s\n", session.status().ToString().c_str());
        return 1;
      }
    }
  }
  for (int i = 0; i < 1000 && cluster.RankCount(v1::ROLE_DESTINATION) < daemons; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  client::CoordinatorClient coordinator_client(address);
  std::vector<double> latencies_ms;
  for (int version = 1; version <= epochs + 1; ++version) {
    for (int d = 0; d < daemons; ++d) registries[d]->Publish(d, version).IgnoreError();
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<v1::RefitReport> report = coordinator_client.Refit(version, absl::Seconds(30));
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (!report.ok()) {
      std::fprintf(stderr, "epoch %d: %s\n", version, report.status().ToString().c_str());
      return 1;
    }
    if (version > 1) latencies_ms.push_back(ms);  // the first epoch also plans and connects
  }
  std::sort(latencies_ms.begin(), latencies_ms.end());
  auto at = [&](double q) {
    return latencies_ms[std::min<size_t>(latencies_ms.size() - 1, q * latencies_ms.size())];
  };
  std::printf(
      "%d daemons, %d epochs of a near-empty plan: p50 %.2f ms, p99 %.2f ms, max %.2f ms "
      "(target p50 under 20 ms)\n",
      daemons, epochs, at(0.5), at(0.99), latencies_ms.back());
  links.clear();
  return 0;
}

}  // namespace
}  // namespace refit::daemon

int main(int argc, char** argv) {
  const int daemons = argc > 1 ? std::atoi(argv[1]) : 64;
  const int epochs = argc > 2 ? std::atoi(argv[2]) : 100;
  return refit::daemon::Run(daemons, epochs);
}

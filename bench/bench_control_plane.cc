// Control-plane benchmark: one coordinator and N refitd daemons in one process (each with
// its own registry, control stream and UCX worker), R source and R destination ranks per
// daemon holding one element each, so a refit moves almost nothing and its latency is the
// control plane's: publish -> Refit -> plan slices and execute to every daemon -> reports
// -> commit. Prints the registration time, the first epoch (which also plans and
// connects), and p50 and p99 over many epochs.
//   bench_control_plane [DAEMONS=64] [EPOCHS=100] [RANKS_PER_DAEMON_AND_SIDE=1]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/daemon_clients.h"
#include "coordinator/coordinator_server.h"
#include "daemon/mutex_mode.h"
#include "refitd/coordinator_link.h"
#include "spdlog/spdlog.h"
#include "transport/shared_memory.h"

namespace refit::daemon {
namespace {

v1::RegisterRankRequest OneElementRank(v1::Role role, int64_t rank, int64_t ranks,
                                       const std::string& host, const std::string& shm) {
  v1::RegisterRankRequest request;
  request.set_role(role);
  v1::TensorSpec* tensor = request.add_tensors();
  tensor->set_name("w");
  tensor->set_dtype("F32");
  tensor->add_shape(ranks);
  v1::RankLayout* layout = request.mutable_layout();
  layout->set_rank(rank);
  layout->set_host(host);
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

int Run(int daemons, int epochs, int per_daemon) {
  spdlog::set_level(spdlog::level::warn);
  const int ranks = daemons * per_daemon;  // per side
  v1::JobSpec job;
  job.set_name("bench");
  job.set_source_ranks(ranks);
  job.set_destination_ranks(ranks);
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
  const auto registration_start = std::chrono::steady_clock::now();
  for (int d = 0; d < daemons; ++d) {
    registries.push_back(std::make_unique<RankRegistry>(absl::StrCat("node-", d)));
    links.push_back(std::make_unique<CoordinatorLink>(address, absl::StrCat("node-", d),
                                                      registries.back().get()));
    links.back()->Start();
    for (v1::Role role : {v1::ROLE_SOURCE, v1::ROLE_DESTINATION}) {
      for (int r = d * per_daemon; r < (d + 1) * per_daemon; ++r) {
        const std::string shm = absl::StrCat("/refit-cpbench-", getpid(), "-", segments.size());
        auto segment = transport::SharedMemorySegment::Create(shm, 4);
        if (!segment.ok()) return 1;
        segments.push_back(std::move(*segment));
        absl::StatusOr<std::string> session = registries.back()->Register(
            OneElementRank(role, r, ranks, absl::StrCat("node-", d), shm));
        if (!session.ok()) {
          std::fprintf(stderr, "%s\n", session.status().ToString().c_str());
          return 1;
        }
      }
    }
  }
  for (int i = 0; i < 6000 && (cluster.RankCount(v1::ROLE_DESTINATION) < ranks ||
                               cluster.RankCount(v1::ROLE_SOURCE) < ranks);
       ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  const double registration_ms = std::chrono::duration<double, std::milli>(
                                     std::chrono::steady_clock::now() - registration_start)
                                     .count();
  double first_epoch_ms = 0;
  client::CoordinatorClient coordinator_client(address);
  std::vector<double> latencies_ms;
  for (int version = 1; version <= epochs + 1; ++version) {
    for (int r = 0; r < ranks; ++r) {
      registries[r / per_daemon]->Publish(r, version).IgnoreError();
    }
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<v1::RefitReport> report = coordinator_client.Refit(version, absl::Seconds(30));
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (!report.ok()) {
      std::fprintf(stderr, "epoch %d: %s\n", version, report.status().ToString().c_str());
      return 1;
    }
    if (version > 1) latencies_ms.push_back(ms);  // the first epoch also plans and connects
    if (version == 1) first_epoch_ms = ms;
  }
  std::sort(latencies_ms.begin(), latencies_ms.end());
  auto at = [&](double q) {
    return latencies_ms[std::min<size_t>(latencies_ms.size() - 1, q * latencies_ms.size())];
  };
  std::printf(
      "%d daemons, %d ranks: registration %.0f ms, first epoch (plans, connects) %.1f ms; "
      "%d epochs of a near-empty plan: p50 %.2f ms, p99 %.2f ms, max %.2f ms "
      "(target p50: 10 ms up to 64 daemons, 30 ms up to 128 daemons and 1,024 ranks)\n",
      daemons, 2 * ranks, registration_ms, first_epoch_ms, epochs, at(0.5), at(0.99),
      latencies_ms.back());
  links.clear();
  return 0;
}

}  // namespace
}  // namespace refit::daemon

int main(int argc, char** argv) {
  refit::daemon::SkipMutexDeadlockDetection();  // as in refitd and the coordinator
  const int daemons = argc > 1 ? std::atoi(argv[1]) : 64;
  const int epochs = argc > 2 ? std::atoi(argv[2]) : 100;
  const int per_daemon = argc > 3 ? std::atoi(argv[3]) : 1;
  if (daemons < 1 || epochs < 1 || per_daemon < 1) {
    std::fprintf(stderr, "usage: bench_control_plane [DAEMONS] [EPOCHS] [RANKS_PER_DAEMON]\n");
    return 2;
  }
  return refit::daemon::Run(daemons, epochs, per_daemon);
}

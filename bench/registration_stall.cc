// How long a publish waits while another rank of the same refitd registers a large buffer.
// The registry maps a rank's segments and populates their pages before it takes its lock
// (transport::BufferMap::OpenRank), so the longest publish during the registration of a
// rank of N GiB stays near an idle publish, far below the registration itself, which is
// what every publish, version wait and epoch of the node waited when the mapping ran under
// the lock.
//
// Usage: registration_stall [GiB, default 4]. Needs that much free /dev/shm.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "planner/testing/layout_builder.h"
#include "refitd/rank_registry.h"
#include "refitd/testing/registration.h"
#include "spdlog/spdlog.h"
#include "transport/testing/backed_layouts.h"

namespace {

using refit::daemon::RankRegistry;
using refit::daemon::testing::RegistrationOf;

// Publishes source rank 0 until `until` says stop, from version `*version` on; the
// publishes' latencies in microseconds, ascending.
std::vector<double> PublishUntil(RankRegistry* registry, int64_t* version,
                                 const std::function<bool()>& until) {
  std::vector<double> latencies;
  do {
    const absl::Time start = absl::Now();
    if (!registry->Publish(0, ++*version).ok()) std::abort();
    latencies.push_back(absl::ToDoubleMicroseconds(absl::Now() - start));
  } while (!until());
  std::sort(latencies.begin(), latencies.end());
  return latencies;
}

}  // namespace

int main(int argc, char** argv) {
  spdlog::set_level(spdlog::level::warn);
  const int64_t gib = argc > 1 ? std::atoll(argv[1]) : 4;
  refit::transport::testing::BackedLayouts backed;
  refit::testing::LayoutBuilder source;
  source.Tensor("small", {1024}).Replicated("small", {0});
  refit::testing::LayoutBuilder destination;
  const int64_t rows = gib * 256 * 1024;  // rows of 1,024 F32 elements: 4 KiB each
  destination.Tensor("large", {rows, 1024}).Replicated("large", {0});
  const refit::v1::LayoutSpec sources = backed.Back(source.spec(), "source");
  const refit::v1::LayoutSpec destinations = backed.Back(destination.spec(), "destination");

  RankRegistry registry("bench-node");
  if (!registry.Register(RegistrationOf(refit::v1::ROLE_SOURCE, sources.ranks(0), sources)).ok()) {
    std::fprintf(stderr, "registering the source rank failed\n");
    return 1;
  }
  int64_t version = 0;
  int idle = 0;
  const std::vector<double> idle_latencies =
      PublishUntil(&registry, &version, [&]() { return ++idle >= 20000; });

  std::atomic<bool> registered{false};
  absl::Duration registering;
  std::thread registrar([&]() {
    const absl::Time start = absl::Now();
    absl::StatusOr<std::string> session = registry.Register(
        RegistrationOf(refit::v1::ROLE_DESTINATION, destinations.ranks(0), destinations));
    registering = absl::Now() - start;
    if (!session.ok()) {
      std::fprintf(stderr, "registering the large rank failed: %s\n",
                   std::string(session.status().message()).c_str());
      std::abort();
    }
    registered = true;
  });
  const std::vector<double> during =
      PublishUntil(&registry, &version, [&]() { return registered.load(); });
  registrar.join();

  auto at = [](const std::vector<double>& v, double q) {
    return v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))];
  };
  std::printf("registration of a %lld GiB rank: %.3f s\n", static_cast<long long>(gib),
              absl::ToDoubleSeconds(registering));
  std::printf("%-34s %10s %10s %10s %10s\n", "publishes of another rank", "count", "p50 us",
              "p99 us", "max us");
  std::printf("%-34s %10zu %10.1f %10.1f %10.1f\n", "idle", idle_latencies.size(),
              at(idle_latencies, 0.5), at(idle_latencies, 0.99), idle_latencies.back());
  std::printf("%-34s %10zu %10.1f %10.1f %10.1f\n", "during the registration", during.size(),
              at(during, 0.5), at(during, 0.99), during.back());
  std::printf("longest publish during / registration: %.4f (1.0: the registration stalls it)\n",
              during.back() / 1e6 / absl::ToDoubleSeconds(registering));
  return 0;
}

#include "daemon/http_endpoints.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/time/clock.h"
#include "daemon/metrics.h"
#include "gtest/gtest.h"

namespace refit::daemon {
namespace {

// Every series an alert might ask for is exported before anything happened, at zero.
TEST(HttpEndpointsTest, EverySeriesIsExportedFromStart) {
  auto registry = std::make_shared<prometheus::Registry>();
  CoordinatorMetrics coordinator(registry);
  DaemonMetrics daemon(registry, "node-0");
  auto endpoints = HttpEndpoints::Start("127.0.0.1", 0, registry, [] { return true; });
  ASSERT_TRUE(endpoints.ok()) << endpoints.status();
  httplib::Client client("127.0.0.1", (*endpoints)->port());
  auto response = client.Get("/metrics");
  ASSERT_TRUE(response);
  for (const std::string series :
       {"refit_epochs_total{result=\"aborted\"} 0", "refit_bytes_total{route=\"network\"} 0",
        "refit_registered_ranks{role=\"destination\"} 0",
        "refit_refits_refused_total{reason=\"incomplete_group\"} 0",
        "refit_refits_refused_total{reason=\"invalid_layout\"} 0",
        "refit_last_commit_timestamp_seconds 0",
        "refitd_epochs_total{node=\"node-0\",result=\"failed\"} 0",
        "refitd_bytes_total{node=\"node-0\",route=\"network\"} 0",
        "refitd_registered_ranks{node=\"node-0\",role=\"source\"} 0"}) {
    EXPECT_NE(response->body.find(series), std::string::npos) << series << "\n" << response->body;
  }
}

TEST(HttpEndpointsTest, MetricsHealthAndReadiness) {
  auto registry = std::make_shared<prometheus::Registry>();
  CoordinatorMetrics metrics(registry);
  metrics.EpochCommitted(0.5, 1000, 200, 30, 7);
  std::atomic<bool> ready{false};
  auto endpoints = HttpEndpoints::Start("127.0.0.1", 0, registry, [&]() { return ready.load(); });
  ASSERT_TRUE(endpoints.ok()) << endpoints.status();
  httplib::Client client("127.0.0.1", (*endpoints)->port());

  auto response = client.Get("/metrics");
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 200);
  EXPECT_NE(response->body.find("refit_epochs_total{result=\"committed\"} 1"), std::string::npos)
      << response->body;
  EXPECT_NE(response->body.find("refit_bytes_total{route=\"network\"} 1000"), std::string::npos);
  EXPECT_NE(response->body.find("refit_current_version 7"), std::string::npos);
  EXPECT_NE(response->body.find("refit_epoch_duration_seconds_count 1"), std::string::npos);

  response = client.Get("/healthz");
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 200);
  response = client.Get("/readyz");
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 503);
  ready = true;
  response = client.Get("/readyz");
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 200);
}

// A client that trickles its request header, a byte every `interval`, for `total`.
void TrickleHeader(int port, absl::Duration interval, absl::Duration total) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address = {};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0) {
    const std::string header = "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaa";
    const absl::Time end = absl::Now() + total;
    for (size_t i = 0; i < header.size() && absl::Now() < end; ++i) {
      if (send(fd, &header[i], 1, MSG_NOSIGNAL) != 1) break;
      absl::SleepFor(interval);
    }
  }
  close(fd);
}

// Sixteen clients hold connections open by trickling their request headers (a byte every
// 400 ms, within the server's 1 s read timeout, for 4 s) while probes come: each probe is
// answered while they all still hold theirs. A server whose workers they could all take would
// answer no probe until they give up (after the probes' 3 s timeout).
TEST(HttpEndpointsTest, ProbesAreAnsweredWhileSlowClientsTrickleHeaders) {
  auto registry = std::make_shared<prometheus::Registry>();
  auto endpoints = HttpEndpoints::Start("127.0.0.1", 0, registry, []() { return true; });
  ASSERT_TRUE(endpoints.ok()) << endpoints.status();
  const int port = (*endpoints)->port();
  std::vector<std::thread> slow;
  for (int i = 0; i < 16; ++i) {
    slow.emplace_back(TrickleHeader, port, absl::Milliseconds(400), absl::Seconds(4));
  }
  absl::Cleanup join = [&slow] {
    for (std::thread& t : slow) t.join();
  };
  absl::SleepFor(absl::Milliseconds(300));  // every slow client holds a connection
  for (int probe = 0; probe < 3; ++probe) {
    httplib::Client client("127.0.0.1", port);
    client.set_read_timeout(3, 0);
    client.set_connection_timeout(3, 0);
    auto response = client.Get("/healthz");
    ASSERT_TRUE(response) << "probe " << probe << " got no answer";
    EXPECT_EQ(response->status, 200);
    absl::SleepFor(absl::Milliseconds(200));
  }
}

}  // namespace
}  // namespace refit::daemon

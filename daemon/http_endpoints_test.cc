#include "daemon/http_endpoints.h"

#include <httplib.h>

#include <atomic>

#include "daemon/metrics.h"
#include "gtest/gtest.h"

namespace refit::daemon {
namespace {

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

}  // namespace
}  // namespace refit::daemon

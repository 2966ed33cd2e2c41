#include "tests/in_process/testing/coordinator_with_daemons.h"

#include <chrono>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace refit::daemon::testing {

absl::Status CoordinatorWithDaemons::Start(const v1::JobSpec& job, CoordinatorMetrics* metrics) {
  absl::StatusOr<std::unique_ptr<CoordinatorServer>> server =
      CoordinatorServer::Start("127.0.0.1:0", job, absl::Seconds(30), metrics);
  if (!server.ok()) return server.status();
  server_ = std::move(*server);
  address_ = server_->address();
  stub_ =
      v1::Coordinator::NewStub(grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
  return absl::OkStatus();
}

CoordinatorLink* CoordinatorWithDaemons::Link(RankRegistry* registry, const std::string& node,
                                              DaemonMetrics* metrics) {
  Unlink(node);
  std::unique_ptr<CoordinatorLink>& link = links_[node];
  link = std::make_unique<CoordinatorLink>(address_, node, registry, metrics);
  link->Start();
  return link.get();
}

void CoordinatorWithDaemons::Unlink(const std::string& node) {
  auto it = links_.find(node);
  if (it != links_.end()) it->second.reset();
}

absl::Status CoordinatorWithDaemons::RestartCoordinator(const v1::JobSpec& job) {
  server_.reset();
  absl::StatusOr<std::unique_ptr<CoordinatorServer>> server =
      CoordinatorServer::Start(address_, job, absl::Seconds(30), nullptr);
  if (!server.ok()) return server.status();
  server_ = std::move(*server);
  return absl::OkStatus();
}

void CoordinatorWithDaemons::Stop() {
  links_.clear();
  server_.reset();
}

grpc::Status CoordinatorWithDaemons::Refit(int64_t version, v1::RefitReport* report,
                                           int64_t deadline_ms) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  v1::RefitRequest request;
  request.set_version(version);
  request.set_deadline_ms(deadline_ms);
  return stub_->Refit(&context, request, report);
}

v1::StatusResponse CoordinatorWithDaemons::Status() {
  grpc::ClientContext context;
  v1::StatusResponse status;
  const grpc::Status called = stub_->Status(&context, v1::StatusRequest(), &status);
  EXPECT_TRUE(called.ok()) << called.error_message();
  return status;
}

bool CoordinatorWithDaemons::GroupSeen(int64_t sources, int64_t destinations) {
  const Cluster& cluster = server_->cluster();
  return Eventually([&]() {
    return cluster.RankCount(v1::ROLE_SOURCE) == sources &&
           cluster.RankCount(v1::ROLE_DESTINATION) == destinations;
  });
}

bool CoordinatorWithDaemons::Sees(const std::function<bool(const ClusterSnapshot&)>& seen) {
  return Eventually([&]() {
    absl::StatusOr<ClusterSnapshot> snapshot = server_->cluster().Snapshot();
    return snapshot.ok() && seen(*snapshot);
  });
}

bool CoordinatorWithDaemons::Eventually(const std::function<bool()>& done) {
  // The coordinator offers no notification of its view changing: polled, bounded.
  const absl::Time give_up = absl::Now() + absl::Seconds(5);
  while (!done()) {
    if (absl::Now() >= give_up) return false;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return true;
}

}  // namespace refit::daemon::testing

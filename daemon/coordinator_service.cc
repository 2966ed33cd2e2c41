#include "daemon/coordinator_service.h"

#include <memory>

#include "absl/synchronization/mutex.h"
#include "daemon/status_mapping.h"

namespace refit::daemon {
namespace {

// Writes to one daemon's control stream; refuses once the stream's handler has returned.
class StreamChannel : public DaemonChannel {
 public:
  explicit StreamChannel(
      grpc::ServerReaderWriter<v1::CoordinatorMessage, v1::DaemonMessage>* stream)
      : stream_(stream) {}

  bool Send(const v1::CoordinatorMessage& message) override {
    absl::MutexLock lock(&mu_);
    return stream_ != nullptr && stream_->Write(message);
  }
  void Close() {
    absl::MutexLock lock(&mu_);
    stream_ = nullptr;
  }

 private:
  absl::Mutex mu_;
  grpc::ServerReaderWriter<v1::CoordinatorMessage, v1::DaemonMessage>* stream_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

void CoordinatorService::UpdateRankGauges() {
  if (metrics_ == nullptr) return;
  metrics_->ranks.Add({{"role", "source"}}).Set(cluster_->RankCount(v1::ROLE_SOURCE));
  metrics_->ranks.Add({{"role", "destination"}}).Set(cluster_->RankCount(v1::ROLE_DESTINATION));
}

grpc::Status CoordinatorService::Control(
    grpc::ServerContext*,
    grpc::ServerReaderWriter<v1::CoordinatorMessage, v1::DaemonMessage>* stream) {
  v1::DaemonMessage message;
  if (!stream->Read(&message) || !message.has_hello() || message.hello().node().empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "a control stream starts with a hello naming the node");
  }
  auto channel = std::make_shared<StreamChannel>(stream);
  const int32_t index = cluster_->AddDaemon(message.hello(), channel);
  while (stream->Read(&message)) {
    switch (message.body_case()) {
      case v1::DaemonMessage::kRegisterRank:
        // A conflicting registration is left out of the group; the rank's Refit reports it.
        cluster_->AddRank(index, message.register_rank()).IgnoreError();
        UpdateRankGauges();
        break;
      case v1::DaemonMessage::kDeregisterRank:
        cluster_->RemoveRank(index, message.deregister_rank().role(),
                             message.deregister_rank().rank());
        UpdateRankGauges();
        break;
      case v1::DaemonMessage::kPublished:
        cluster_->MarkPublished(index, message.published().rank(), message.published().version());
        break;
      case v1::DaemonMessage::kProgress:
        runner_->OnProgress(index, message.progress());
        break;
      case v1::DaemonMessage::kDone:
        runner_->OnDone(index, message.done());
        break;
      default:
        break;
    }
  }
  channel->Close();
  cluster_->RemoveDaemon(index);
  UpdateRankGauges();
  runner_->OnDaemonLost(index);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::Refit(grpc::ServerContext*, const v1::RefitRequest* request,
                                       v1::RefitReport* response) {
  const absl::Duration timeout =
      request->deadline_ms() > 0 ? absl::Milliseconds(request->deadline_ms()) : default_deadline_;
  absl::StatusOr<v1::RefitReport> report = runner_->Refit(request->version(), timeout);
  if (!report.ok()) return ToGrpc(report.status());
  *response = *report;
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::Status(grpc::ServerContext*, const v1::StatusRequest*,
                                        v1::StatusResponse* response) {
  *response = runner_->Status();
  return grpc::Status::OK;
}

}  // namespace refit::daemon

namespace refit::daemon {

grpc::Status CoordinatorService::Layouts(grpc::ServerContext*, const v1::LayoutsRequest*,
                                         v1::LayoutsResponse* response) {
  absl::StatusOr<ClusterSnapshot> snapshot = cluster_->Snapshot();
  if (!snapshot.ok()) return ToGrpc(snapshot.status());
  *response->mutable_sources() = snapshot->sources;
  *response->mutable_destinations() = snapshot->destinations;
  for (const v1::RankPlacement& p : snapshot->placement) *response->add_placement() = p;
  for (const v1::DaemonPeer& d : snapshot->daemons) {
    v1::DaemonPeer* peer = response->add_daemons();
    peer->set_index(d.index());
    peer->set_node(d.node());
  }
  return grpc::Status::OK;
}

}  // namespace refit::daemon

namespace refit::daemon {

grpc::Status CoordinatorService::WatchEpoch(grpc::ServerContext* context,
                                            const v1::WatchEpochRequest* request,
                                            grpc::ServerWriter<v1::EpochProgress>* writer) {
  const absl::Duration timeout =
      request->timeout_ms() > 0 ? absl::Milliseconds(request->timeout_ms()) : default_deadline_;
  const bool found = runner_->Watch(
      request->epoch_id(), absl::Now() + timeout,
      [&](const v1::EpochProgress& progress) {
        return !context->IsCancelled() && writer->Write(progress);
      },
      [&]() { return context->IsCancelled(); });
  if (!found) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND, request->epoch_id().empty()
                                                         ? "no epoch started in time"
                                                         : "no such epoch: " + request->epoch_id());
  }
  return grpc::Status::OK;
}

}  // namespace refit::daemon

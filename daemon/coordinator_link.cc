#include "daemon/coordinator_link.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "spdlog/spdlog.h"
#include "transport/plan_executor.h"

namespace refit::daemon {

void CoordinatorLink::Start() {
  registry_->SetListener([this](const RankRegistry::Event& event) {
    const bool registered = event.kind == RankRegistry::Event::kRegistered;
    if (metrics_ != nullptr && event.kind != RankRegistry::Event::kPublished) {
      const char* role = event.rank.role() == v1::ROLE_SOURCE ? "source" : "destination";
      metrics_->ranks.Add({{"role", role}}).Increment(registered ? 1 : -1);
    }
    v1::DaemonMessage message;
    switch (event.kind) {
      case RankRegistry::Event::kRegistered:
        *message.mutable_register_rank() = event.rank;
        break;
      case RankRegistry::Event::kDeregistered:
        message.mutable_deregister_rank()->set_role(event.rank.role());
        message.mutable_deregister_rank()->set_rank(event.rank.layout().rank());
        break;
      case RankRegistry::Event::kPublished:
        message.mutable_published()->set_rank(event.rank.layout().rank());
        message.mutable_published()->set_version(event.version);
        break;
    }
    Write(message);  // when not connected, the next session sends everything anyway
  });
  thread_ = std::thread([this]() { Run(); });
}

void CoordinatorLink::Stop() {
  if (!thread_.joinable()) return;
  stopping_ = true;
  {
    absl::MutexLock lock(&mu_);
    if (context_ != nullptr) context_->TryCancel();
  }
  thread_.join();
  registry_->SetListener(nullptr);
}

bool CoordinatorLink::Write(const v1::DaemonMessage& message) {
  absl::MutexLock lock(&mu_);
  return stream_ != nullptr && stream_->Write(message);
}

void CoordinatorLink::Run() {
  absl::StatusOr<std::unique_ptr<transport::UcxWorker>> worker =
      transport::UcxWorker::Create(node_);
  if (!worker.ok()) return;  // no data plane: nothing this daemon could do
  while (!stopping_) {
    Session(worker->get());
    connected_ = false;
    for (int i = 0; i < 10 && !stopping_; ++i) absl::SleepFor(absl::Milliseconds(50));
  }
  peers_.clear();  // endpoints before their worker
}

void CoordinatorLink::Session(transport::UcxWorker* worker) {
  auto channel = grpc::CreateChannel(coordinator_, grpc::InsecureChannelCredentials());
  auto stub = v1::Coordinator::NewStub(channel);
  grpc::ClientContext context;
  std::unique_ptr<Stream> stream = stub->Control(&context);
  {
    absl::MutexLock lock(&mu_);
    context_ = &context;
    stream_ = stream.get();
  }
  if (stopping_) context.TryCancel();
  v1::DaemonMessage hello;
  hello.mutable_hello()->set_node(node_);
  hello.mutable_hello()->set_data_plane_address(worker->address());
  bool ok = Write(hello);
  for (const v1::RankRegistration& rank : registry_->Registrations()) {
    v1::DaemonMessage message;
    *message.mutable_register_rank() = rank;
    ok = ok && Write(message);
    const int64_t published = registry_->PublishedVersion(rank.layout().rank());
    if (rank.role() == v1::ROLE_SOURCE && published >= 0) {
      v1::DaemonMessage publish;
      publish.mutable_published()->set_rank(rank.layout().rank());
      publish.mutable_published()->set_version(published);
      ok = ok && Write(publish);
    }
  }
  connected_ = ok;
  v1::CoordinatorMessage message;
  while (ok && stream->Read(&message)) {
    switch (message.body_case()) {
      case v1::CoordinatorMessage::kPlan:
        slice_ = message.plan();
        break;
      case v1::CoordinatorMessage::kExecute: {
        v1::DaemonMessage done;
        *done.mutable_done() = Execute(message.execute(), worker);
        if (metrics_ != nullptr) {
          metrics_->EpochDone(done.done().ok(), done.done().ok() ? last_bytes_by_route_ : nullptr);
        }
        Write(done);
        break;
      }
      case v1::CoordinatorMessage::kCommit:
        registry_->Commit(message.commit().version());
        break;
      default:
        break;
    }
  }
  {
    absl::MutexLock lock(&mu_);
    context_ = nullptr;
    stream_ = nullptr;
  }
  stream->WritesDone();
  stream->Finish().IgnoreError();
}

v1::EpochDone CoordinatorLink::Execute(const v1::ExecuteEpoch& execute,
                                       transport::UcxWorker* worker) {
  v1::EpochDone done;
  done.set_epoch_id(execute.epoch_id());
  const absl::Time start = absl::Now();
  auto fail = [&](const absl::Status& status) {
    done.set_ok(false);
    done.set_error(absl::StrCat(node_, ": ", status.message()));
    spdlog::warn("refitd {}: epoch {} failed after {:.3f} s: {}", node_, execute.epoch_id(),
                 absl::ToDoubleSeconds(absl::Now() - start), std::string(status.message()));
    return done;
  };
  if (slice_.digest() != execute.plan_digest()) {
    return fail(absl::FailedPreconditionError("no plan slice for this epoch's plan"));
  }
  transport::RankPlacement placement;
  for (const v1::RankPlacement& p : slice_.placement())
    placement.Place(p.role(), p.rank(), p.daemon());
  std::vector<transport::UcxEndpoint*> peers;
  for (const v1::DaemonPeer& peer : slice_.daemons()) {
    if (peer.index() < 0 || peer.index() > 1 << 20)
      return fail(absl::InvalidArgumentError("bad daemon index"));
    if (peers.size() <= static_cast<size_t>(peer.index())) peers.resize(peer.index() + 1, nullptr);
    if (peer.index() == slice_.daemon_index()) continue;
    auto& [address, endpoint] = peers_[peer.index()];
    if (endpoint == nullptr || address != peer.data_plane_address()) {
      absl::StatusOr<std::unique_ptr<transport::UcxEndpoint>> connected =
          worker->Connect(peer.data_plane_address());
      if (!connected.ok()) return fail(connected.status());
      address = peer.data_plane_address();
      endpoint = std::move(*connected);
    }
    peers[peer.index()] = endpoint.get();
  }
  transport::PlanExecutor executor(registry_->buffers(), placement, slice_.daemon_index(), worker,
                                   peers);
  executor.OnProgress([&](int64_t delivered) {
    v1::DaemonMessage progress;
    progress.mutable_progress()->set_epoch_id(execute.epoch_id());
    progress.mutable_progress()->set_bytes_done(delivered);
    Write(progress);
  });
  absl::StatusOr<transport::ExecutionStats> stats =
      executor.Run(slice_.plan(), execute.epoch_number(),
                   absl::Now() + absl::Milliseconds(std::max<int64_t>(1, execute.deadline_ms())));
  if (!stats.ok()) return fail(stats.status());
  std::copy(std::begin(stats->bytes_by_route), std::end(stats->bytes_by_route),
            last_bytes_by_route_);
  spdlog::debug("refitd {}: epoch {} done: {} transfers, {} bytes in {:.3f} s", node_,
                execute.epoch_id(), stats->transfers, stats->bytes,
                absl::ToDoubleSeconds(absl::Now() - start));
  done.set_ok(true);
  return done;
}

}  // namespace refit::daemon

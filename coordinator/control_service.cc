#include "coordinator/control_service.h"

#include <memory>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "daemon/control_validation.h"
#include "daemon/monotonic_clock.h"
#include "daemon/request_limits.h"
#include "daemon/status_mapping.h"
#include "security/grpc_security.h"
#include "spdlog/spdlog.h"

namespace refit::daemon {
namespace {

// Writes to one daemon's control stream; refuses once the stream's handler has returned.
class StreamChannel : public DaemonChannel {
 public:
  StreamChannel(grpc::ServerContext* context,
                grpc::ServerReaderWriter<v1::CoordinatorMessage, v1::DaemonMessage>* stream)
      : context_(context), stream_(stream) {}

  bool Send(const v1::CoordinatorMessage& message) override {
    absl::MutexLock write(&write_mu_);
    {
      absl::MutexLock lock(&state_mu_);
      if (closed_) return false;
      writing_ = true;
      writing_since_ = MonotonicNow();
    }
    const bool written = stream_->Write(message);
    absl::MutexLock lock(&state_mu_);
    writing_ = false;
    return written;
  }
  absl::Duration WriteBlockedFor(absl::Duration now) override {
    absl::MutexLock lock(&state_mu_);
    return writing_ ? now - writing_since_ : absl::ZeroDuration();
  }
  // The handler is returning: no Send may touch the stream after this.
  void Close() {
    {
      absl::MutexLock lock(&state_mu_);
      closed_ = true;
    }
    absl::MutexLock write(&write_mu_);  // waits out a Send in flight (the call is over)
  }
  // Never waits for a Send: a write to a peer that stopped reading blocks until this
  // cancellation ends it.
  void Cut() override {
    absl::MutexLock lock(&state_mu_);
    cut_ = true;
    cut_while_writing_ = writing_;
    if (!closed_) context_->TryCancel();
  }
  // What ended the daemon's session, for its epoch's error.
  std::string Ending() {
    absl::MutexLock lock(&state_mu_);
    if (!cut_) return "disconnected during the epoch";
    return cut_while_writing_ ? "stopped reading its control stream (a message waited a lease)"
                              : "stopped answering (its lease expired)";
  }

 private:
  absl::Mutex write_mu_;  // one Write at a time
  absl::Mutex state_mu_;
  grpc::ServerContext* context_;
  bool cut_ ABSL_GUARDED_BY(state_mu_) = false;
  bool cut_while_writing_ ABSL_GUARDED_BY(state_mu_) = false;
  bool writing_ ABSL_GUARDED_BY(state_mu_) = false;          // a Write is in flight
  absl::Duration writing_since_ ABSL_GUARDED_BY(state_mu_);  // MonotonicNow()
  bool closed_ ABSL_GUARDED_BY(state_mu_) = false;
  grpc::ServerReaderWriter<v1::CoordinatorMessage, v1::DaemonMessage>* stream_;
};

}  // namespace

void ControlService::UpdateRankGauges() {
  if (metrics_ == nullptr) return;
  metrics_->ranks.Add({{"role", "source"}}).Set(cluster_->RankCount(v1::ROLE_SOURCE));
  metrics_->ranks.Add({{"role", "destination"}}).Set(cluster_->RankCount(v1::ROLE_DESTINATION));
  runner_->UpdateReplicaGauges();
}

grpc::Status ControlService::Control(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<v1::CoordinatorMessage, v1::DaemonMessage>* stream) {
  if (grpc::Status allowed = security::CheckToken(token_, *context, "REFIT_DAEMON_TOKEN_FILE");
      !allowed.ok())
    return allowed;
  v1::DaemonMessage message;
  {
    absl::MutexLock lock(&hello_mu_);
    awaiting_hello_[context] = MonotonicNow() + lease_;
  }
  const bool read = stream->Read(&message);
  {
    absl::MutexLock lock(&hello_mu_);
    awaiting_hello_.erase(context);
  }
  if (!read || !message.has_hello() || message.hello().node().empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "a control stream starts with a hello naming the node");
  }
  if (absl::Status valid = CheckHello(message.hello()); !valid.ok()) {
    spdlog::warn("refused a control stream from {}: {}", context->peer(),
                 std::string(valid.message()));
    return ToGrpc(valid);
  }
  const v1::DaemonHello hello = message.hello();
  auto channel = std::make_shared<StreamChannel>(context, stream);
  bool superseded = false;
  const absl::StatusOr<DaemonSession> added = cluster_->AddDaemon(hello, channel, &superseded);
  if (!added.ok()) {
    spdlog::warn("{}", std::string(added.status().message()));
    return ToGrpc(added.status());
  }
  const DaemonSession session = *added;
  if (superseded) {
    spdlog::warn("refitd on {} reconnected (incarnation {}); its previous session is fenced",
                 hello.node(), hello.incarnation());
    runner_->OnDaemonLost(session.index, "was replaced by a new session of the node");
  }
  v1::CoordinatorMessage welcome;
  welcome.mutable_welcome()->set_daemon_index(session.index);
  welcome.mutable_welcome()->set_lease_ms(absl::ToInt64Milliseconds(lease_));
  channel->Send(welcome);
  // Before the daemon registers anything: if it is in doubt about an epoch, its hello may
  // be what settles that epoch for it and for others.
  runner_->SettleDaemonsInDoubt();
  SendPeerDestinations(session.index);
  while (stream->Read(&message)) {
    // Fenced: a newer session of the node took over.
    if (!cluster_->Touch(session, /*handling=*/true)) break;
    switch (message.body_case()) {
      case v1::DaemonMessage::kRegisterRank: {
        // An oversized or conflicting registration is left out of the group; the Refit
        // reports the rank missing.
        const v1::RankRegistration& rank = message.register_rank();
        v1::CoordinatorMessage answer;
        v1::RegistrationAnswer* said = answer.mutable_registration();
        said->set_role(rank.role());
        said->set_rank(rank.layout().rank());
        said->set_registration_id(rank.registration_id());
        // Every registration hears how it went; refitd tells the registering process.
        auto refuse = [&](const absl::Status& why) {
          spdlog::warn("refitd on {}: registration refused: {}", hello.node(),
                       std::string(why.message()));
          said->set_code(static_cast<int32_t>(why.code()));
          said->set_refusal(std::string(why.message()));
          channel->Send(answer);
        };
        absl::Status within = CheckRegistrationLimits(rank.role(), rank.layout(), rank.tensors());
        if (!within.ok()) {
          refuse(within);
          break;
        }
        const bool destination = rank.role() == v1::ROLE_DESTINATION;
        if (absl::Status added =
                cluster_->AddRank(session, std::move(*message.mutable_register_rank()));
            !added.ok()) {
          refuse(added);
        } else {
          said->set_accepted(true);
          channel->Send(answer);
          if (destination) SendPeerDestinations(session.index);
          runner_->PrepareSoon();  // the slices go out once the group is complete
        }
        UpdateRankGauges();
        break;
      }
      case v1::DaemonMessage::kDeregisterRank:
        if (absl::Status removed = cluster_->RemoveRank(session, message.deregister_rank().role(),
                                                        message.deregister_rank().rank());
            !removed.ok()) {
          spdlog::warn("refitd on {}: deregistration refused: {}", hello.node(),
                       std::string(removed.message()));
        }
        UpdateRankGauges();
        break;
      case v1::DaemonMessage::kPublished:
        if (absl::Status version =
                CheckVersion(message.published().version(), "a published version");
            !version.ok()) {
          spdlog::warn("refitd on {}: {}", hello.node(), std::string(version.message()));
          break;
        }
        if (absl::Status marked = cluster_->MarkPublished(session, message.published().rank(),
                                                          message.published().version());
            !marked.ok()) {
          spdlog::warn("refitd on {}: publication refused: {}", hello.node(),
                       std::string(marked.message()));
        }
        break;
      case v1::DaemonMessage::kProgress:
        runner_->OnProgress(session.index, message.progress());
        break;
      case v1::DaemonMessage::kDone:
        runner_->OnDone(session.index, message.done());
        break;
      case v1::DaemonMessage::kPaused:
        runner_->OnPaused(session.index, message.paused());
        break;
      case v1::DaemonMessage::kPrepared:
        runner_->OnPrepared(session.index, message.prepared());
        break;
      default:  // heartbeats only renew the lease
        break;
    }
    // The time the coordinator spent on the message (checking and storing a registration
    // of tens of MB) is not the daemon's silence: the lease runs again from here.
    cluster_->Touch(session);
  }
  channel->Close();
  if (!cluster_->IsCurrent(session)) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "this control session was replaced by a newer one of the node");
  }
  cluster_->RemoveDaemon(session);
  UpdateRankGauges();
  runner_->OnDaemonLost(session.index, channel->Ending());
  return grpc::Status::OK;
}

void ControlService::SendPeerDestinations(int32_t daemon) {
  for (Cluster::PeerDestinationList& list : cluster_->PeerDestinationsAround(daemon)) {
    if (list.ranks.ranks_size() == 0) continue;
    v1::CoordinatorMessage message;
    *message.mutable_peer_destinations() = std::move(list.ranks);
    list.channel->Send(message);  // a daemon gone meanwhile maps them at its first epoch
  }
}

int ControlService::CutStreamsWithoutHello(absl::Duration now) {
  absl::MutexLock lock(&hello_mu_);
  int cut = 0;
  for (auto& [context, deadline] : awaiting_hello_) {
    if (now < deadline) continue;
    context->TryCancel();  // its handler is in the first Read and erases it once woken
    deadline = absl::InfiniteDuration();
    ++cut;
  }
  return cut;
}

}  // namespace refit::daemon

#include "refitd/coordinator_link.h"

#include <unistd.h>

#include <algorithm>
#include <random>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "spdlog/spdlog.h"

namespace refit::daemon {
namespace {

// The shortest time between two progress messages of an epoch.
constexpr absl::Duration kProgressInterval = absl::Milliseconds(20);

// The nodes of the daemons holding the slice's destination ranks.
std::vector<std::string> DestinationNodes(const v1::PlanSlice* slice) {
  std::vector<std::string> nodes;
  if (slice == nullptr) return nodes;
  std::set<int32_t> daemons;
  for (const v1::RankPlacement& p : slice->placement()) {
    if (p.role() == v1::ROLE_DESTINATION) daemons.insert(p.daemon());
  }
  for (const v1::DaemonPeer& peer : slice->daemons()) {
    if (daemons.count(peer.index())) nodes.push_back(peer.node());
  }
  return nodes;
}

}  // namespace

std::string CoordinatorLink::NewIncarnation() {
  std::random_device random;
  return absl::StrCat(absl::Hex(random(), absl::kZeroPad8), absl::Hex(random(), absl::kZeroPad8),
                      "-", getpid());
}

void CoordinatorLink::Start() {
  registry_->SetListener([this](const RankRegistry::Event& event) {
    const bool registered = event.kind == RankRegistry::Event::kRegistered;
    if (metrics_ != nullptr && event.kind != RankRegistry::Event::kPublished) {
      const char* role = event.rank.role() == v1::ROLE_SOURCE ? "source" : "destination";
      metrics_->ranks.Add({{"role", role}}).Increment(registered ? 1 : -1);
      if (event.rank.role() == v1::ROLE_DESTINATION) {
        const int64_t rank = event.rank.layout().rank();
        if (registered) {
          metrics_->DestinationVersion(rank, -1);
        } else {
          metrics_->ForgetDestination(rank);
        }
      }
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
  // Each worker's address goes into the hello; a session already open said another one
  // (or none), so it ends, and the next hello carries the new one.
  executor_ = std::make_unique<EpochExecutor>(
      node_, registry_, metrics_, &interrupt_, &stopping_, [this](const std::string& address) {
        absl::MutexLock lock(&mu_);
        data_plane_address_ = address;
        if (context_ != nullptr) {
          spdlog::info("refitd {}: new data-plane worker; reconnecting to say its address", node_);
          context_->TryCancel();
        }
      });
  executor_->ShareMemoryWithin(shared_memory_domain_);
  executor_->SetCopyThreads(copy_threads_);
  // Without a data-plane worker the daemon still connects (its ranks register, the
  // coordinator and refitctl see it), and the epoch thread keeps trying to make one.
  executor_->EnsureWorker();
  epochs_ = std::make_unique<EpochQueue>(
      &interrupt_,
      [this]() {
        MapPeerDestinations();
        std::shared_ptr<const v1::PlanSlice> slice;
        const bool worker = executor_->EnsureWorker();
        {
          absl::MutexLock lock(&mu_);
          slice = std::move(slice_to_prepare_);
          slice_to_prepare_.reset();
        }
        // The coordinator executes an epoch once every daemon said how its preparation went.
        const absl::Time start = absl::Now();
        const absl::Status prepared = executor_->Prepare(slice);
        if (slice != nullptr) {
          v1::DaemonMessage said;
          v1::SlicePrepared* what = said.mutable_prepared();
          what->set_plan_digest(slice->digest());
          what->set_ok(prepared.ok());
          what->set_error(std::string(prepared.message()));
          what->set_seconds(absl::ToDoubleSeconds(absl::Now() - start));
          Write(said);
        }
        return worker;
      },
      [this](const EpochQueue::Job& job) { RunEpoch(job.execute, job.slice); });
  thread_ = std::thread([this]() { Run(); });
  heartbeat_thread_ = std::thread([this]() { Heartbeat(); });
}

void CoordinatorLink::Heartbeat() {
  v1::DaemonMessage beat;
  beat.mutable_heartbeat();
  while (!stopping_.raised()) {
    // The lease comes with each session's Welcome. Asleep until the beat is due or Stop
    // says so (not polling: a host of many daemons would wake for nothing a hundred times
    // a second each).
    const absl::Duration interval = absl::Milliseconds(std::max<int64_t>(lease_ms_ / 4, 10));
    if (stopping_.SleepFor(interval)) break;
    if (connected_) Write(beat);
  }
}

void CoordinatorLink::Stop() {
  if (!thread_.joinable()) return;
  stopping_.Raise("refitd is stopping");
  // A running epoch stops at once and reports its interruption while the stream is up.
  interrupt_.Raise("refitd is stopping");
  epochs_->AwaitIdle(absl::Seconds(5));
  {
    absl::MutexLock lock(&mu_);
    if (context_ != nullptr) context_->TryCancel();
  }
  thread_.join();
  heartbeat_thread_.join();
  registry_->engine_pauses().ResumeUpTo(v1::WriteNotice::ABORTED, EnginePauses::kAll,
                                        "refitd is stopping");
  if (pauser_.joinable()) pauser_.join();
  epochs_.reset();  // runs what is queued, then joins the epoch thread
  executor_.reset();
  registry_->SetListener(nullptr);
}

bool CoordinatorLink::Write(const v1::DaemonMessage& message) {
  absl::MutexLock lock(&mu_);
  return stream_ != nullptr && stream_->Write(message);
}

void CoordinatorLink::Run() {
  // Reconnects with exponential backoff (0.1 s doubling to 5 s), from the start again
  // after a session that was welcomed.
  absl::Duration backoff = absl::Milliseconds(100);
  while (!stopping_.raised()) {
    welcomed_ = false;
    Session();
    connected_ = false;
    if (welcomed_) backoff = absl::Milliseconds(100);
    if (stopping_.SleepFor(backoff)) break;
    backoff = std::min(backoff * 2, absl::Seconds(5));
  }
}

void CoordinatorLink::Session() {
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      security::MakeChannelCredentials(security_);
  if (!credentials.ok()) {
    WarnOnce(std::string(credentials.status().message()));
    return;
  }
  // Keepalive pings notice a coordinator that became unreachable (a partition, a host gone
  // without closing its connections) within about a lease: the session ends, and the
  // epoch with it, instead of waiting for the epoch deadline.
  const int keepalive_ms = static_cast<int>(std::max<int64_t>(lease_ms_ / 2, 250));
  grpc::ChannelArguments arguments;
  arguments.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, keepalive_ms);
  arguments.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, keepalive_ms);
  arguments.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  arguments.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // A large model's plan slice is tens of megabytes; the coordinator sends up to 256 MiB.
  arguments.SetMaxReceiveMessageSize(256 << 20);
  auto channel = grpc::CreateCustomChannel(coordinator_, *credentials, arguments);
  auto stub = v1::CoordinatorControl::NewStub(channel);
  grpc::ClientContext context;
  security::AttachToken(security_, &context);
  std::unique_ptr<Stream> stream = stub->Control(&context);
  {
    absl::MutexLock lock(&mu_);
    context_ = &context;
  }
  if (stopping_.raised()) context.TryCancel();
  bool ok = SayHello(stream.get());
  connected_ = ok;
  v1::CoordinatorMessage message;
  while (ok && stream->Read(&message)) {
    switch (message.body_case()) {
      case v1::CoordinatorMessage::kWelcome:
        lease_ms_ = message.welcome().lease_ms() > 0 ? message.welcome().lease_ms() : 5000;
        welcomed_ = true;
        registry_->ExpectAnswers(true);
        break;
      case v1::CoordinatorMessage::kRegistration:
        registry_->Answer(message.registration());
        break;
      case v1::CoordinatorMessage::kPlan:
        slice_ = std::make_shared<const v1::PlanSlice>(std::move(*message.mutable_plan()));
        {
          absl::MutexLock lock(&mu_);
          slice_to_prepare_ = slice_;
        }
        epochs_->Nudge();
        break;
      case v1::CoordinatorMessage::kExecute:
        OnExecute(message.execute());
        break;
      case v1::CoordinatorMessage::kPeerDestinations: {
        auto ranks =
            std::make_shared<const v1::LayoutSpec>(std::move(*message.mutable_peer_destinations()));
        {
          absl::MutexLock lock(&mu_);
          peer_destinations_ = std::move(ranks);
        }
        epochs_->Nudge();
        break;
      }
      case v1::CoordinatorMessage::kAbort:
        OnAbort(message.abort());
        break;
      case v1::CoordinatorMessage::kCommit:
        OnCommit(message.commit());
        break;
      case v1::CoordinatorMessage::kPause:
        OnPause(message.pause());
        break;
      case v1::CoordinatorMessage::kResume:
        registry_->engine_pauses().Resume(
            {message.resume().ranks().begin(), message.resume().ranks().end()},
            v1::WriteNotice::SKIPPED, -1, message.resume().reason());
        break;
      default:
        break;
    }
  }
  EndSession();
  stream->WritesDone();
  const grpc::Status finished = stream->Finish();
  if (finished.ok() || stopping_.raised()) {
    last_stream_error_.clear();
  } else {
    WarnOnce(
        absl::StrCat("control stream to ", coordinator_, " ended: ", finished.error_message()));
  }
}

bool CoordinatorLink::SayHello(Stream* stream) {
  v1::DaemonMessage hello;
  hello.mutable_hello()->set_node(node_);
  hello.mutable_hello()->set_gpu(gpu_);
  hello.mutable_hello()->set_shared_memory_domain(shared_memory_domain_);
  hello.mutable_hello()->set_incarnation(incarnation_);
  hello.mutable_hello()->set_committed_version(registry_->CommittedVersion());
  hello.mutable_hello()->set_last_epoch_number(last_epoch_number_);
  bool ok = false;
  {
    // The hello is the stream's first message: other writers (a rank registering right
    // now, progress) see the stream only once it is out, and the coordinator refuses a
    // stream that opens with anything else. What they miss is sent just below.
    absl::MutexLock lock(&mu_);
    hello.mutable_hello()->set_data_plane_address(data_plane_address_);
    hello.mutable_hello()->set_committed_epoch_id(committed_epoch_);
    if (!executed_epoch_.empty() && executed_reported_) {
      v1::InDoubtEpoch* in_doubt = hello.mutable_hello()->mutable_in_doubt();
      in_doubt->set_epoch_id(executed_epoch_);
      in_doubt->set_version(executed_version_);
      for (const std::string& node : executed_destination_nodes_) {
        in_doubt->add_destination_nodes(node);
      }
    }
    ok = stream->Write(hello);
    stream_ = stream;
  }
  registry_->Replay([&](const RankRegistry::Event& event) {
    v1::DaemonMessage message;
    if (event.kind == RankRegistry::Event::kPublished) {
      message.mutable_published()->set_rank(event.rank.layout().rank());
      message.mutable_published()->set_version(event.version);
    } else {
      *message.mutable_register_rank() = event.rank;
    }
    ok = ok && Write(message);
  });
  return ok;
}

void CoordinatorLink::OnExecute(const v1::ExecuteEpoch& execute) {
  // The coordinator runs one epoch at a time; one still running here was aborted
  // there, so it is interrupted (if the abort has not done so already).
  epochs_->Finish(absl::StrCat("the coordinator began epoch ", execute.epoch_id()));
  interrupt_.Clear();
  if (stopping_.raised()) interrupt_.Raise("refitd is stopping");
  {
    std::string superseded;
    int64_t superseded_version = -1;
    {
      absl::MutexLock lock(&mu_);
      superseded.swap(executed_epoch_);
      superseded_version = executed_version_;
      running_epoch_ = execute.epoch_id();
      executed_epoch_ = running_epoch_;
      executed_version_ = execute.version();
      executed_reported_ = false;
      last_epoch_number_ = std::max(last_epoch_number_, execute.epoch_number());
    }
    // Still in doubt about an older epoch: the coordinator moved on without settling
    // it, and this epoch overwrites its bytes.
    if (!superseded.empty()) {
      spdlog::warn("refitd {}: epoch {} supersedes epoch {}, whose outcome never came", node_,
                   execute.epoch_id(), superseded);
      registry_->Abort(superseded_version, superseded,
                       "a newer epoch began before its outcome was known");
    }
  }
  epochs_->Submit({execute, slice_});
  // Stop may have raced with the clear above.
  if (stopping_.raised()) interrupt_.Raise("refitd is stopping");
}

void CoordinatorLink::OnAbort(const v1::AbortEpoch& abort) {
  bool executed = false;
  {
    absl::MutexLock lock(&mu_);
    if (abort.epoch_id() == running_epoch_) {
      spdlog::warn("refitd {}: coordinator aborted epoch {}: {}", node_, running_epoch_,
                   abort.reason());
      interrupt_.Raise(
          absl::StrCat("the coordinator aborted epoch ", running_epoch_, ": ", abort.reason()));
    }
    executed = abort.epoch_id() == executed_epoch_;
    if (executed) executed_epoch_.clear();  // settled
    if (executed) executed_reported_ = false;
  }
  if (executed) {
    // No write into the buffers after they are marked.
    epochs_->Finish(absl::StrCat("the coordinator aborted epoch ", abort.epoch_id()));
    registry_->Abort(abort.version(), abort.epoch_id(), abort.reason(), abort.retried());
  }
  // The engines resume, unless the version is moved again at once (they stay paused).
  if (!abort.retried()) {
    registry_->engine_pauses().ResumeUpTo(v1::WriteNotice::ABORTED, abort.version(),
                                          abort.reason());
  }
}

void CoordinatorLink::OnCommit(const v1::CommitEpoch& commit) {
  const int64_t version = commit.version();
  {
    absl::MutexLock lock(&mu_);
    if (commit.epoch_id() != executed_epoch_ || !executed_reported_) {
      spdlog::warn(
          "refitd {}: ignored the commit of epoch {}, which it is not waiting "
          "to commit",
          node_, commit.epoch_id());
      return;
    }
    executed_epoch_.clear();
    committed_epoch_ = commit.epoch_id();
  }
  registry_->Commit(version, [this, version](int64_t rank) {
    if (metrics_ != nullptr) metrics_->DestinationVersion(rank, version);
  });
  // The engines paused for this epoch resume (a skipped one was resumed then).
  registry_->engine_pauses().ResumeUpTo(v1::WriteNotice::COMMITTED, version, "");
}

void CoordinatorLink::OnPause(const v1::PauseRanks& pause) {
  if (pauser_.joinable()) pauser_.join();  // it ended by its own deadline
  pauser_ = std::thread([this, pause]() {
    const std::vector<int64_t> paused = registry_->engine_pauses().Pause(
        pause, absl::Now() + absl::Milliseconds(pause.deadline_ms()));
    v1::DaemonMessage message;
    message.mutable_paused()->set_pause_id(pause.pause_id());
    for (int64_t rank : paused) message.mutable_paused()->add_ranks(rank);
    Write(message);
  });
}

void CoordinatorLink::EndSession() {
  registry_->ExpectAnswers(false);               // a registration waiting for its answer goes on
  epochs_->Finish("the control session ended");  // the coordinator is gone: so is its epoch
  std::string unsettled;
  int64_t unsettled_version = -1;
  {
    absl::MutexLock lock(&mu_);
    context_ = nullptr;
    stream_ = nullptr;
    if (executed_reported_ && !executed_epoch_.empty()) {
      // The coordinator may have committed it elsewhere: only a coordinator may say.
      if (in_doubt_said_ != executed_epoch_) {
        spdlog::warn(
            "refitd {}: lost the coordinator after finishing epoch {}; in doubt about "
            "its outcome until a coordinator says",
            node_, executed_epoch_);
        in_doubt_said_ = executed_epoch_;
      }
    } else {
      unsettled.swap(executed_epoch_);
      unsettled_version = executed_version_;
    }
  }
  // Neither committed nor aborted, and never reported done, so not committed anywhere:
  // its writes are partial.
  if (!unsettled.empty()) {
    spdlog::warn("refitd {}: lost the coordinator during epoch {}; treating it as aborted", node_,
                 unsettled);
    registry_->Abort(unsettled_version, unsettled, "the coordinator went away during the epoch");
  }
  registry_->engine_pauses().ResumeUpTo(v1::WriteNotice::ABORTED, EnginePauses::kAll,
                                        "the coordinator went away");
}

void CoordinatorLink::WarnOnce(const std::string& problem) {
  if (problem != last_stream_error_) spdlog::warn("refitd {}: {}", node_, problem);
  last_stream_error_ = problem;
}

void CoordinatorLink::MapPeerDestinations() {
  std::shared_ptr<const v1::LayoutSpec> ranks;
  {
    absl::MutexLock lock(&mu_);
    ranks = std::move(peer_destinations_);
    peer_destinations_.reset();
  }
  if (ranks != nullptr) executor_->MapPeerDestinations(*ranks);
}

void CoordinatorLink::RunEpoch(const v1::ExecuteEpoch& execute,
                               const std::shared_ptr<const v1::PlanSlice>& slice) {
  v1::DaemonMessage done;
  // Progress at most every kProgressInterval: an epoch of many quick batches would
  // otherwise write a message per batch on the stream (and the coordinator read them all),
  // and the report of a short epoch says everything anyway.
  absl::Time last_progress = absl::Now();
  *done.mutable_done() = executor_->Run(execute, slice, [&](int64_t delivered) {
    const absl::Time now = absl::Now();
    if (now - last_progress < kProgressInterval) return;
    last_progress = now;
    v1::DaemonMessage progress;
    progress.mutable_progress()->set_epoch_id(execute.epoch_id());
    progress.mutable_progress()->set_bytes_done(delivered);
    Write(progress);
  });
  {
    absl::MutexLock lock(&mu_);
    running_epoch_.clear();
    // Reported done from here on (even if the report is lost with the stream).
    if (done.done().ok() && executed_epoch_ == execute.epoch_id()) {
      executed_reported_ = true;
      executed_destination_nodes_ = DestinationNodes(slice.get());
    }
  }
  Write(done);
}

}  // namespace refit::daemon

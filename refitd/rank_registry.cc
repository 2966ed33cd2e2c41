#include "refitd/rank_registry.h"

#include <algorithm>
#include <random>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "daemon/cancellable_wait.h"
#include "daemon/open_file_limit.h"
#include "daemon/request_limits.h"
#include "planner/dtype.h"
#include "planner/layout.h"
#include "spdlog/spdlog.h"
#include "transport/shared_memory.h"

namespace refit::daemon {
namespace {

// A registration maps each shared-memory segment and keeps its descriptor (to see it
// truncated later): past the budget every later client would find refitd out of
// descriptors (EMFILE), so the rank is refused here, naming the limit.
absl::Status CheckDescriptorBudget(const std::string& who, const v1::RankLayout& layout) {
  int64_t segments = 0;
  for (const v1::BufferSpec& buffer : layout.buffers()) segments += !buffer.shm_name().empty();
  if (segments == 0) return absl::OkStatus();
  const int64_t limit = OpenFileLimit();
  const int64_t open = OpenFileCount();
  const int64_t budget = RegistrationDescriptorBudget(limit);
  if (limit == INT64_MAX || open < 0 || open + segments <= budget) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      who, ": its ", segments, " shared-memory segments would take refitd to ", open + segments,
      " open descriptors, past the ", budget, " registrations may hold (half of the ", limit,
      " allowed: ulimit -n, LimitNOFILE in the systemd unit); raise the limit, or register "
      "fewer, larger segments"));
}

using transport::RankName;

// How long a registration waits for an earlier registration of the same rank to go.
constexpr absl::Duration kPredecessorGrace = absl::Seconds(1);

}  // namespace

void RankRegistry::SetListener(Listener listener) {
  absl::MutexLock lock(&mu_);
  listener_ = std::move(listener);
}

void RankRegistry::Notify(const Event& event, uint64_t sequence) {
  Listener listener;
  {
    absl::MutexLock lock(&mu_);
    listener = listener_;
  }
  // In the order the changes happened: a rank's departure and its successor's
  // registration, made on two threads, must reach the coordinator in that order.
  absl::MutexLock delivering(&delivery_mu_);
  auto my_turn = [&]()
                     ABSL_EXCLUSIVE_LOCKS_REQUIRED(delivery_mu_) { return delivered_ == sequence; };
  delivery_mu_.Await(absl::Condition(&my_turn));
  if (listener) listener(event);
  ++delivered_;
}

void RankRegistry::Replay(const Listener& emit) {
  absl::MutexLock delivering(&delivery_mu_);  // no change is delivered meanwhile
  std::vector<Event> events;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [key, entry] : ranks_) {
      events.push_back(Event{Event::kRegistered, entry.registration});
      if (key.role == v1::ROLE_DESTINATION && entry.version > 0) {
        events.back().rank.set_held_version(entry.version);
      }
      if (key.role == v1::ROLE_SOURCE && entry.version >= 0) {
        events.push_back(Event{Event::kPublished, entry.registration, entry.version});
      }
    }
  }
  for (const Event& event : events) emit(event);
}

absl::StatusOr<std::string> RankRegistry::Register(const v1::RegisterRankRequest& request) {
  const v1::RankLayout& layout = request.layout();
  if (request.role() != v1::ROLE_SOURCE && request.role() != v1::ROLE_DESTINATION) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", layout.rank(), ": role must be source or destination"));
  }
  absl::Status within = CheckRegistrationLimits(request.role(), layout, request.tensors());
  if (!within.ok()) return within;
  const std::string who = RankName(request.role(), layout.rank());
  // The planner's validation, on a layout of this one rank.
  v1::LayoutSpec single;
  *single.mutable_tensors() = request.tensors();
  *single.add_ranks() = layout;
  absl::StatusOr<planner::Layout> compiled =
      planner::CompileLayout(single, request.role() == v1::ROLE_SOURCE ? "source" : "destination");
  if (!compiled.ok()) return compiled.status();
  for (const v1::ShardView& view : layout.views()) {
    if (view.buffer().empty() && !layout.bucketed()) {
      return absl::InvalidArgumentError(absl::StrCat(
          who, ": view of ", view.tensor(), " names no buffer (register the memory it lives in)"));
    }
  }
  v1::RankRegistration registration;
  registration.set_role(request.role());
  *registration.mutable_layout() = layout;
  *registration.mutable_tensors() = request.tensors();
  // Counts this process's descriptors (a directory read): before the lock others wait on.
  if (absl::Status budget = CheckDescriptorBudget(who, layout); !budget.ok()) return budget;
  // Maps the rank's buffers and populates their pages (seconds for tens of GB) before the
  // lock too: publishes, version waits and epochs of the other ranks go on meanwhile, and
  // the rank is seen only once it is mapped.
  absl::StatusOr<transport::BufferMap::OpenedRank> opened =
      transport::BufferMap::OpenRank(request.role(), layout);
  if (!opened.ok()) return opened.status();
  std::string session;
  uint64_t sequence = 0;
  {
    absl::MutexLock lock(&mu_);
    // Waits for a running epoch to end (up to a minute), and for a predecessor of the same
    // rank to leave (up to kPredecessorGrace): a rank restarted right after its process
    // died may come before refitd has noticed the old connection closed (it looks every
    // 100 ms).
    const transport::RankKey key{request.role(), layout.rank()};
    auto can_register = [this, &key]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return holds_ == 0 && ranks_.count(key) == 0;
    };
    const absl::Time give_up = absl::Now() + absl::Minutes(1);
    const absl::Time grace_end = absl::Now() + kPredecessorGrace;
    while (!can_register()) {
      const absl::Time now = absl::Now();
      if (holds_ == 0 && now >= grace_end) {
        return absl::AlreadyExistsError(absl::StrCat(who, " is already registered on ", node_));
      }
      if (now >= give_up) {
        return absl::UnavailableError(
            absl::StrCat(who, ": an epoch has been running on ", node_, " for a minute; retry"));
      }
      mu_.AwaitWithDeadline(absl::Condition(&can_register), holds_ > 0 ? give_up : grace_end);
    }
    transport::TensorTable declared;
    for (const planner::TensorInfo& t : compiled->tensors) {
      declared[t.name] = transport::TensorShape{t.element_bytes, t.shape};
    }
    absl::Status added = buffers_.AddRank(request.role(), layout, &declared, *std::move(opened));
    if (!added.ok()) return added;
    session = NewSessionId();
    // Random and never 0: the coordinator tells this registration from the rank's next one.
    std::random_device random;
    registration.set_registration_id((uint64_t{random()} << 32 | random()) | 1);
    Entry& entry = ranks_[{request.role(), layout.rank()}];
    entry.registration = registration;
    entry.session = session;
    entry.aborts_seen = aborts_;
    sequence = next_event_++;
  }
  spdlog::info("refitd {}: {} registered (session {}){}", node_, who, session,
               layout.staged() ? ", staged: the data plane writes a shadow copied in at commit"
               : layout.bucketed()
                   ? ", bucketed: its process copies in each bucket the data plane fills"
                   : "");
  Notify(Event{Event::kRegistered, registration}, sequence);
  absl::Status refused = AwaitAnswer({request.role(), layout.rank()}, session);
  if (!refused.ok()) {
    spdlog::warn("refitd {}: {} refused by the coordinator: {}", node_, who,
                 std::string(refused.message()));
    // Nobody else can have registered the rank meanwhile: this registration holds it.
    Deregister(request.role(), layout.rank()).IgnoreError();
    return refused;
  }
  return session;
}

absl::Status RankRegistry::AwaitAnswer(const transport::RankKey& key, const std::string& session) {
  absl::MutexLock lock(&mu_);
  auto settled = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = ranks_.find(key);
    return !answers_expected_ || it == ranks_.end() || it->second.session != session ||
           it->second.answered;
  };
  mu_.AwaitWithTimeout(absl::Condition(&settled), kAnswerWait);
  auto it = ranks_.find(key);
  if (it == ranks_.end() || it->second.session != session) return absl::OkStatus();
  return it->second.refusal;
}

void RankRegistry::ExpectAnswers(bool expected) {
  absl::MutexLock lock(&mu_);
  answers_expected_ = expected;
}

void RankRegistry::Answer(const v1::RegistrationAnswer& answer) {
  absl::MutexLock lock(&mu_);
  auto it = ranks_.find({answer.role(), answer.rank()});
  if (it == ranks_.end() || it->second.registration.registration_id() != answer.registration_id()) {
    return;  // a registration that is gone
  }
  it->second.answered = true;
  const absl::StatusCode code = answer.code() > 0 && answer.code() <= 16
                                    ? static_cast<absl::StatusCode>(answer.code())
                                    : absl::StatusCode::kUnknown;
  if (answer.accepted()) {
    it->second.refusal = absl::OkStatus();
    it->second.hold = answer.held()
                          ? absl::Status(code, absl::StrCat(RankName(answer.role(), answer.rank()),
                                                            ": the coordinator holds its replica "
                                                            "out of refits: ",
                                                            answer.refusal()))
                          : absl::OkStatus();
    if (answer.held()) {
      spdlog::warn("refitd {}: {}", node_, std::string(it->second.hold.message()));
    }
    return;
  }
  it->second.refusal = absl::Status(
      code, absl::StrCat(RankName(answer.role(), answer.rank()),
                         ": the coordinator refused its registration: ", answer.refusal()));
}

absl::Status RankRegistry::Deregister(v1::Role role, int64_t rank) {
  v1::RankRegistration gone;
  uint64_t sequence = 0;
  {
    absl::MutexLock lock(&mu_);
    auto it = ranks_.find({role, rank});
    if (it == ranks_.end()) {
      return absl::NotFoundError(
          absl::StrCat(RankName(role, rank), " is not registered on ", node_));
    }
    gone = it->second.registration;
    ranks_.erase(it);
    sequence = next_event_++;
    if (holds_ > 0) {
      retiring_.push_back({role, rank});
    } else {
      buffers_.RemoveRank(role, rank);
    }
  }
  spdlog::info("refitd {}: {} left", node_, RankName(role, rank));
  Notify(Event{Event::kDeregistered, gone}, sequence);
  return absl::OkStatus();
}

std::map<transport::RankKey, RankRegistry::Entry>::iterator RankRegistry::FindSession(
    const std::string& session) {
  for (auto it = ranks_.begin(); it != ranks_.end(); ++it) {
    if (it->second.session == session) return it;
  }
  return ranks_.end();
}

absl::StatusOr<int64_t> RankRegistry::RankOfSession(const std::string& session,
                                                    bool (*has)(const v1::RankLayout&),
                                                    const char* refusal) {
  absl::MutexLock lock(&mu_);
  auto it = FindSession(session);
  if (it == ranks_.end()) {
    return absl::NotFoundError(
        absl::StrCat("registration session ", session, " is not registered on ", node_));
  }
  if (!has(it->second.registration.layout())) {
    return absl::FailedPreconditionError(absl::StrCat(it->first.Name(), " ", refusal));
  }
  return it->first.rank;
}

absl::StatusOr<int64_t> RankRegistry::BucketedRankOf(const std::string& session) {
  return RankOfSession(
      session, [](const v1::RankLayout& layout) { return layout.bucketed(); },
      "is not bucketed: refitd writes its buffers itself");
}

absl::StatusOr<int64_t> RankRegistry::PausingRankOf(const std::string& session) {
  return RankOfSession(
      session, [](const v1::RankLayout& layout) { return layout.pauses_for_writes(); },
      "was not registered with pauses_for_writes: refit does not wait for its engine");
}

void RankRegistry::DeregisterSession(const std::string& session, bool reclaim_shared_memory) {
  transport::RankKey key;
  std::vector<std::string> segments;
  {
    absl::MutexLock lock(&mu_);
    auto it = FindSession(session);
    if (it == ranks_.end()) return;
    key = it->first;
    for (const v1::BufferSpec& buffer : it->second.registration.layout().buffers()) {
      if (!buffer.shm_name().empty()) segments.push_back(buffer.shm_name());
    }
  }
  // The names go before the rank does: once anyone can see the rank gone, its process's
  // segments are gone too (the mappings stay valid; only the names are removed, and no
  // other registration uses them: they are unique to this one).
  if (reclaim_shared_memory) {
    for (const std::string& name : segments) {
      absl::Status unlinked = transport::UnlinkSharedMemory(name);
      if (!unlinked.ok()) {
        spdlog::warn("refitd {}: {}", node_, std::string(unlinked.message()));
      }
    }
  }
  // A concurrent Deregister of the same rank makes this one NOT_FOUND, which is fine.
  Deregister(key.role, key.rank).IgnoreError();
}

std::string RankRegistry::NewSessionId() {
  // Unguessable: a client of the socket that guessed a live rank's session could end its
  // hold and have its segments unlinked.
  std::random_device random;
  std::string id = absl::StrCat(node_, "/");
  for (int i = 0; i < 4; ++i) absl::StrAppend(&id, absl::Hex(random(), absl::kZeroPad8));
  issued_sessions_.push_back(id);
  if (issued_sessions_.size() > kSessionsRemembered) issued_sessions_.pop_front();
  return id;
}

absl::StatusOr<bool> RankRegistry::AwaitSessionEnd(const std::string& session,
                                                   absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  if (FindSession(session) == ranks_.end() &&
      std::find(issued_sessions_.begin(), issued_sessions_.end(), session) ==
          issued_sessions_.end()) {
    return absl::NotFoundError(absl::StrCat("no registration session ", session, " on ", node_));
  }
  auto gone = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return FindSession(session) == ranks_.end();
  };
  return mu_.AwaitWithDeadline(absl::Condition(&gone), deadline);
}

absl::Status RankRegistry::Publish(int64_t rank, int64_t version) {
  v1::RankRegistration registration;
  uint64_t sequence = 0;
  {
    absl::MutexLock lock(&mu_);
    auto it = ranks_.find({v1::ROLE_SOURCE, rank});
    if (it == ranks_.end()) {
      return absl::NotFoundError(
          absl::StrCat(RankName(v1::ROLE_SOURCE, rank), " is not registered on ", node_));
    }
    if (!it->second.refusal.ok()) return it->second.refusal;
    if (version <= it->second.version) {
      return absl::FailedPreconditionError(
          absl::StrCat(RankName(v1::ROLE_SOURCE, rank), " already published version ",
                       it->second.version, "; ", version, " is not newer"));
    }
    it->second.version = version;
    registration = it->second.registration;
    sequence = next_event_++;
  }
  Notify(Event{Event::kPublished, registration, version}, sequence);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> RankRegistry::WaitForVersion(int64_t rank, int64_t version,
                                                     absl::Time deadline,
                                                     const std::function<bool()>& cancelled,
                                                     bool ignore_earlier_aborts) {
  const transport::RankKey key = {v1::ROLE_DESTINATION, rank};
  absl::MutexLock lock(&mu_);
  if (!ranks_.count(key)) {
    return absl::NotFoundError(
        absl::StrCat(RankName(v1::ROLE_DESTINATION, rank), " is not registered on ", node_));
  }
  // An abort already settled, of this version or a later one, that concerned this rank and
  // that no epoch followed yet: the caller hears of it now rather than at its deadline.
  const Entry& waiting = ranks_.at(key);
  const bool settled_abort = !ignore_earlier_aborts && !epoch_open_ &&
                             waiting.aborts_seen < aborts_ && waiting.version < version &&
                             last_abort_.version >= version;
  const int64_t aborts_before = settled_abort ? aborts_ - 1 : aborts_;
  auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = ranks_.find(key);
    return it == ranks_.end() || it->second.version >= version || it->second.torn >= version ||
           !it->second.refusal.ok() || !it->second.hold.ok() ||
           (aborts_ != aborts_before && last_abort_.version >= version);
  };
  const bool gave_up = !AwaitCancellable(mu_, absl::Condition(&ready), deadline, cancelled) &&
                       cancelled && cancelled();
  auto it = ranks_.find(key);
  if (it == ranks_.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat(RankName(v1::ROLE_DESTINATION, rank),
                     " was deregistered while waiting for version ", version));
  }
  const Entry& entry = it->second;
  if (entry.version >= version) return entry.version;
  if (!entry.refusal.ok()) return entry.refusal;  // never in the group: nothing will come
  if (!entry.hold.ok()) return entry.hold;        // nothing comes until the hold ends
  const std::string holds = absl::StrCat(
      "its buffers hold version ", entry.version,
      entry.partial >= 0 ? absl::StrCat(" and may hold parts of version ", entry.partial) : "");
  if (entry.torn >= version) {
    return absl::DataLossError(absl::StrCat(RankName(v1::ROLE_DESTINATION, rank),
                                            " waited for version ", version, ": version ",
                                            entry.torn,
                                            " was committed but not copied into its "
                                            "buffers (",
                                            entry.torn_reason, "); ", holds));
  }
  if (aborts_ != aborts_before && last_abort_.version >= version) {
    return absl::AbortedError(
        absl::StrCat(RankName(v1::ROLE_DESTINATION, rank), " waited for version ", version,
                     ": epoch ", last_abort_.epoch_id, " moving version ", last_abort_.version,
                     " was aborted (", last_abort_.reason, "); ", holds));
  }
  if (gave_up && !ready()) {
    return absl::CancelledError(absl::StrCat(RankName(v1::ROLE_DESTINATION, rank),
                                             ": the wait for version ", version, " was cancelled; ",
                                             holds));
  }
  return absl::DeadlineExceededError(absl::StrCat(RankName(v1::ROLE_DESTINATION, rank),
                                                  " waited for version ", version,
                                                  " until its deadline; ", holds));
}

RankRegistry::BufferHold::BufferHold(RankRegistry* registry) : registry_(registry) {}

RankRegistry::BufferHold::BufferHold(BufferHold&& other) noexcept
    : registry_(std::exchange(other.registry_, nullptr)) {}

RankRegistry::BufferHold::~BufferHold() {
  if (registry_ != nullptr) registry_->Release();
}

const transport::BufferMap& RankRegistry::BufferHold::buffers() const {
  return registry_->buffers_;
}

transport::BufferMap& RankRegistry::BufferHold::mutable_buffers() { return registry_->buffers_; }

RankRegistry::BufferHold RankRegistry::HoldBuffers() {
  absl::MutexLock lock(&mu_);
  ++holds_;
  return BufferHold(this);
}

RankRegistry::BufferHold RankRegistry::BeginEpoch(const std::set<int64_t>& planned_destinations) {
  absl::MutexLock lock(&mu_);
  ++holds_;
  epoch_open_ = true;
  epoch_destinations_.clear();
  for (const auto& [key, entry] : ranks_) {
    if (key.role == v1::ROLE_DESTINATION && planned_destinations.count(key.rank)) {
      epoch_destinations_[key.rank] = entry.session;
    }
  }
  buffers_.StageEpoch(planned_destinations);
  return BufferHold(this);
}

void RankRegistry::Release() {
  absl::MutexLock lock(&mu_);
  if (--holds_ > 0) return;
  for (const auto& [role, rank] : retiring_) buffers_.RemoveRank(role, rank);
  retiring_.clear();
}

std::vector<int64_t> RankRegistry::Commit(int64_t version,
                                          const std::function<void(int64_t rank)>& marked) {
  absl::MutexLock lock(&mu_);
  // Before anyone is told the version is there. A rank whose copy faulted holds parts of
  // it: its waiters hear so, not that the version arrived.
  const std::map<int64_t, absl::Status> torn = buffers_.CommitStaged();
  committed_ = std::max(committed_, version);
  std::vector<int64_t> destinations;
  for (auto& [key, entry] : ranks_) {
    if (key.role != v1::ROLE_DESTINATION) continue;
    auto written = epoch_destinations_.find(key.rank);
    if (written == epoch_destinations_.end() || written->second != entry.session) continue;
    if (auto it = torn.find(key.rank); it != torn.end()) {
      spdlog::error("refitd {}: version {} not committed to {}: {}", node_, version, key.Name(),
                    std::string(it->second.message()));
      entry.partial = std::max(entry.partial, version);
      entry.torn = version;
      entry.torn_reason = std::string(it->second.message());
      continue;
    }
    entry.version = std::max(entry.version, version);
    entry.aborts_seen = aborts_;
    if (entry.partial <= entry.version) entry.partial = -1;
    destinations.push_back(key.rank);
    if (marked) marked(key.rank);
  }
  epoch_destinations_.clear();
  epoch_open_ = false;
  return destinations;
}

void RankRegistry::Abort(int64_t version, const std::string& epoch_id, const std::string& reason,
                         bool retried) {
  absl::MutexLock lock(&mu_);
  buffers_.DiscardStaged();     // staged ranks' buffers were never written
  epoch_destinations_.clear();  // no later commit may mark what this epoch wrote
  for (auto& [key, entry] : ranks_) {
    if (key.role == v1::ROLE_DESTINATION && entry.version < version &&
        !entry.registration.layout().staged()) {
      entry.partial = std::max(entry.partial, version);
    }
  }
  if (retried) return;
  epoch_open_ = false;
  ++aborts_;
  last_abort_ = {version, epoch_id, reason};
}

int64_t RankRegistry::CommittedVersion() const {
  absl::MutexLock lock(&mu_);
  return committed_;
}

absl::StatusOr<int64_t> RankRegistry::PartialVersion(int64_t rank) const {
  absl::MutexLock lock(&mu_);
  auto it = ranks_.find({v1::ROLE_DESTINATION, rank});
  if (it == ranks_.end()) {
    return absl::NotFoundError(
        absl::StrCat(RankName(v1::ROLE_DESTINATION, rank), " is not registered on ", node_));
  }
  return it->second.partial;
}

std::vector<v1::RankRegistration> RankRegistry::Registrations() const {
  absl::MutexLock lock(&mu_);
  std::vector<v1::RankRegistration> out;
  for (const auto& [key, entry] : ranks_) out.push_back(entry.registration);
  return out;
}

int64_t RankRegistry::PublishedVersion(int64_t source_rank) const {
  absl::MutexLock lock(&mu_);
  auto it = ranks_.find({v1::ROLE_SOURCE, source_rank});
  return it == ranks_.end() ? -1 : it->second.version;
}

}  // namespace refit::daemon

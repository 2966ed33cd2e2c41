// The ranks one refitd serves: their validated layouts, their mapped buffers, the
// versions source ranks have published and the version destination buffers hold.
// WaitForVersion blocks until the version is committed or the caller's deadline passes.
//
// Threading: called from LocalService's gRPC handler threads (Register, Publish,
// WaitForVersion, Deregister...), from the coordinator link's thread (Answer, Commit,
// Abort, Replay) and from the epoch thread (HoldBuffers, BeginEpoch: while a BufferHold
// lives the buffer map does not change). `mu_` guards the ranks, the buffer map and the
// versions; `delivery_mu_` (taken before `mu_`) hands changes to the listener one at a
// time, in order, outside `mu_`. Register maps and touches a rank's segments while
// holding `mu_`.
#ifndef REFIT_REFITD_RANK_REGISTRY_H_
#define REFIT_REFITD_RANK_REGISTRY_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/refit.pb.h"
#include "refitd/bucket_streams.h"
#include "refitd/engine_pauses.h"
#include "transport/buffer_map.h"
#include "transport/rank_key.h"

namespace refit::daemon {

class RankRegistry {
 public:
  explicit RankRegistry(std::string node) : node_(std::move(node)) {}

  // What happened to a rank; the coordinator link forwards these to the coordinator.
  struct Event {
    enum Kind { kRegistered, kDeregistered, kPublished };
    Kind kind;
    v1::RankRegistration rank;
    int64_t version = -1;  // kPublished
  };
  // Called after every successful registration, deregistration and publish, outside the
  // registry's lock, one at a time and in the order the changes happened.
  using Listener = std::function<void(const Event& event)>;
  void SetListener(Listener listener) ABSL_LOCKS_EXCLUDED(mu_);
  // Calls `emit` with a registration for every rank (and a publish for every source rank
  // that published), while no change is delivered to the listener: a new control session
  // says everything once, and no departure slips in before the registration it follows.
  void Replay(const Listener& emit) ABSL_LOCKS_EXCLUDED(mu_);

  // Validates the rank's layout (the planner's checks), maps its shared-memory buffers and
  // bounds-checks every view. Returns a session id. Errors name the rank and the cause.
  // While a coordinator session is up (ExpectAnswers), waits up to kAnswerWait for the
  // coordinator's answer: a refusal (another node holds the rank) undoes the registration
  // and is returned; a refusal that comes later fails the rank's Publish and
  // WaitForVersion with it.
  absl::StatusOr<std::string> Register(const v1::RegisterRankRequest& request);
  static constexpr absl::Duration kAnswerWait = absl::Seconds(5);
  // The coordinator link: a session is up (answers will come) or ended (none will).
  void ExpectAnswers(bool expected) ABSL_LOCKS_EXCLUDED(mu_);
  // The coordinator's answer to a registration (ignored unless the rank still holds it);
  // later ones hold the rank's replica out of refits or lift the hold.
  void Answer(const v1::RegistrationAnswer& answer) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Deregister(v1::Role role, int64_t rank);
  // Deregisters the rank registered under `session`, if it is still registered. With
  // `reclaim_shared_memory` (the rank's process is gone) the names of its shared-memory
  // segments are removed too, so a killed rank leaves nothing behind in /dev/shm.
  void DeregisterSession(const std::string& session, bool reclaim_shared_memory = false);
  // The rank registered under `session` when it is a bucketed destination (NOT_FOUND: no
  // such session; FAILED_PRECONDITION: the rank is not bucketed).
  absl::StatusOr<int64_t> BucketedRankOf(const std::string& session) ABSL_LOCKS_EXCLUDED(mu_);
  // The same for a destination rank registered with pauses_for_writes.
  absl::StatusOr<int64_t> PausingRankOf(const std::string& session) ABSL_LOCKS_EXCLUDED(mu_);
  // Waits until the rank of `session` is deregistered (true) or `deadline` passes (false).
  // NOT_FOUND for a session that never existed here.
  absl::StatusOr<bool> AwaitSessionEnd(const std::string& session, absl::Time deadline);

  // A source rank's weights for `version` are final.
  absl::Status Publish(int64_t rank, int64_t version);

  // Returns once `version` (or a later one) is committed into the destination rank's
  // buffers; DEADLINE_EXCEEDED at the deadline, FAILED_PRECONDITION if the rank leaves,
  // the coordinator's reason (INVALID_ARGUMENT, FAILED_PRECONDITION) at once while it holds
  // the rank's replica out of refits, ABORTED at once when an epoch moving `version` (or a
  // later one) is aborted while it waits, or was aborted before it began (after the rank last took
  // a version, with no epoch under way since). Errors say which version the buffers hold and
  // whether an aborted epoch may have written parts of a newer one into them. `cancelled` (checked
  // every 100 ms) ends the wait early with CANCELLED: a caller that went away holds no thread.
  // With `ignore_earlier_aborts`, an abort before the call is not reported: only one during it.
  absl::StatusOr<int64_t> WaitForVersion(int64_t rank, int64_t version, absl::Time deadline,
                                         const std::function<bool()>& cancelled = nullptr,
                                         bool ignore_earlier_aborts = false);

  // Marks `version` committed into the destination ranks the last epoch wrote (those of
  // its plan registered when it began: a rank registered later, or registered again, was
  // not written and keeps waiting), after copying the shadows of staged ranks into their
  // buffers. Returns those ranks. `marked(rank)` runs for each under the registry's lock,
  // before any WaitForVersion hears of the commit and before the rank can leave (gauges
  // set there can neither lag the commit nor outlive the rank).
  std::vector<int64_t> Commit(int64_t version,
                              const std::function<void(int64_t rank)>& marked = nullptr);
  // The epoch `epoch_id` moving `version` was aborted after it started writing: every
  // destination rank here still holding an older version may hold parts of this one,
  // except staged ranks, whose buffers were not written (their shadows are dropped).
  // `retried`: the coordinator moves the version again at once (it dropped a lost replica),
  // so those waiting for it keep waiting instead of hearing of the abort.
  void Abort(int64_t version, const std::string& epoch_id, const std::string& reason,
             bool retried = false);
  // The newest version committed into a destination rank here (-1: none).
  int64_t CommittedVersion() const;
  // The newest version an aborted epoch may have partly written into the destination
  // rank's buffers since its last commit (-1: none; NOT_FOUND: no such rank).
  absl::StatusOr<int64_t> PartialVersion(int64_t rank) const;

  // Every registration, for the coordinator.
  std::vector<v1::RankRegistration> Registrations() const;
  int64_t PublishedVersion(int64_t source_rank) const;

  // A hold on the buffer map: while one lives, the map stays as it is (a registration
  // waits for every hold to end, up to a minute, then UNAVAILABLE; a rank that leaves, or
  // dies, is gone at once for everyone else but keeps its memory mapped until the last
  // hold ends), so whoever reads or writes the ranks' memory through it never touches
  // unmapped memory. The buffers are reached only through a hold.
  class BufferHold {
   public:
    BufferHold(BufferHold&& other) noexcept;
    BufferHold(const BufferHold&) = delete;
    BufferHold& operator=(const BufferHold&) = delete;
    BufferHold& operator=(BufferHold&&) = delete;
    ~BufferHold();
    // The map cannot change while the hold lives, so reading it needs no lock. A const
    // map only reads the ranks' memory; the epoch's data plane (and tests that fill
    // views) write through the mutable one.
    const transport::BufferMap& buffers() const ABSL_NO_THREAD_SAFETY_ANALYSIS;
    transport::BufferMap& mutable_buffers() ABSL_NO_THREAD_SAFETY_ANALYSIS;

   private:
    friend class RankRegistry;
    explicit BufferHold(RankRegistry* registry);
    RankRegistry* registry_;
  };
  // Holds the map for reading or writing the ranks' memory outside an epoch.
  BufferHold HoldBuffers() ABSL_LOCKS_EXCLUDED(mu_);
  // Begins an epoch whose plan writes `planned_destinations` here (the ranks a later
  // Commit marks) and holds the map for it until the returned hold ends.
  BufferHold BeginEpoch(const std::set<int64_t>& planned_destinations) ABSL_LOCKS_EXCLUDED(mu_);

  // The streams of the bucketed destination ranks registered here.
  BucketStreams& bucket_streams() { return bucket_streams_; }
  // The WatchWrites streams of the destination ranks registered here that pause for writes.
  EnginePauses& engine_pauses() { return engine_pauses_; }

 private:
  struct Entry {
    v1::RankRegistration registration;
    int64_t version = -1;  // published (sources) or committed (destinations)
    int64_t partial = -1;  // destinations: an aborted epoch's version, newer than `version`
    // Staged destinations: a committed version its commit copy could not write (its
    // segment was truncated), and why.
    int64_t torn = -1;
    std::string torn_reason;
    std::string session;
    // aborts_ when the rank registered or last took a version: an abort counted after it
    // concerns this rank.
    int64_t aborts_seen = 0;
    bool answered = false;  // by the coordinator
    absl::Status refusal;   // the coordinator's, if it refused the registration
    absl::Status hold;      // the coordinator's, while it holds the rank's replica out of refits
  };
  struct AbortRecord {
    int64_t version = -1;
    std::string epoch_id;
    std::string reason;
  };
  // The rank registered under `session` when `has(layout)` (NOT_FOUND: no such session;
  // FAILED_PRECONDITION: `refusal`, after the rank's name).
  absl::StatusOr<int64_t> RankOfSession(const std::string& session,
                                        bool (*has)(const v1::RankLayout&), const char* refusal)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The rank registered under `session`, or ranks_.end().
  std::map<transport::RankKey, Entry>::iterator FindSession(const std::string& session)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Waits (up to kAnswerWait, while answers are expected) for the coordinator's answer to
  // the registration `session` of `key`; its refusal, or OK.
  absl::Status AwaitAnswer(const transport::RankKey& key, const std::string& session)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Ends a BufferHold; the last one removes the ranks that left meanwhile.
  void Release() ABSL_LOCKS_EXCLUDED(mu_);

  // Delivers the change numbered `sequence` (next_event_ when it happened) after every
  // earlier one.
  void Notify(const Event& event, uint64_t sequence) ABSL_LOCKS_EXCLUDED(mu_);

  const std::string node_;
  BucketStreams bucket_streams_;
  EnginePauses engine_pauses_;
  absl::Mutex delivery_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  uint64_t delivered_ ABSL_GUARDED_BY(delivery_mu_) = 0;  // changes delivered so far
  mutable absl::Mutex mu_;
  uint64_t next_event_ ABSL_GUARDED_BY(mu_) = 0;  // the number of the next change
  Listener listener_ ABSL_GUARDED_BY(mu_);
  transport::BufferMap buffers_ ABSL_GUARDED_BY(mu_);
  std::map<transport::RankKey, Entry> ranks_ ABSL_GUARDED_BY(mu_);
  // A new, unguessable session id ("node/" and 128 random bits), remembered.
  std::string NewSessionId() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static constexpr size_t kSessionsRemembered = 4096;
  // The latest sessions issued, so that a hold of one that ended is told so.
  std::deque<std::string> issued_sessions_ ABSL_GUARDED_BY(mu_);
  int64_t aborts_ ABSL_GUARDED_BY(mu_) = 0;
  AbortRecord last_abort_ ABSL_GUARDED_BY(mu_);
  int64_t committed_ ABSL_GUARDED_BY(mu_) = -1;
  // From BeginEpoch to its Commit or (final) Abort; an abort the coordinator retries at once
  // leaves it open. A wait that starts while none is open hears of the last abort at once.
  bool epoch_open_ ABSL_GUARDED_BY(mu_) = false;
  bool answers_expected_ ABSL_GUARDED_BY(mu_) = false;
  int holds_ ABSL_GUARDED_BY(mu_) = 0;  // BufferHolds alive
  // The destination ranks (and their sessions) the last epoch wrote; Commit marks these.
  std::map<int64_t, std::string> epoch_destinations_ ABSL_GUARDED_BY(mu_);
  // Ranks that left while the map was held; their buffers go when the last hold ends.
  std::vector<transport::RankKey> retiring_ ABSL_GUARDED_BY(mu_);
};

}  // namespace refit::daemon

#endif  // REFIT_REFITD_RANK_REGISTRY_H_

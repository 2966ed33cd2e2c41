// Runs refit epochs for the coordinator, one step each: answers a repeat of the committed
// version (AnswerRepeat), checks the group is complete and plans it, once per layout change
// (PlanEpoch), waits until every source rank has published the version (AwaitPublishes),
// opens the epoch's record (StartEpoch: coordinator/epoch_record.h holds its phases), sends every
// daemon its plan slice and the execute command (Launch), waits for every report until the
// deadline, compares checksums and decides, under one lock (Decide), then commits the
// version everywhere or aborts it everywhere (TellDaemons). One epoch at a time.
// With destination replicas (JobSpec.destination_replicas) an epoch moves the version to the
// replicas complete when it starts (ChooseReplicas); a replica lost during it is dropped
// and the epoch runs again for the others (LostReplicas); a replica that completes later
// catches up to the committed version with an epoch of its own (CatchUp).
//
// Threading: called from gRPC handler threads (CoordinatorService: Refit runs a whole
// refit on its caller's thread, Watch and Status; ControlService: each daemon's stream
// thread reports OnDone, OnProgress, OnPaused, OnPrepared, OnDaemonLost, PrepareSoon and
// SettleDaemonsInDoubt) and from its own preparer thread (plans ahead, catch-up epochs).
// One refit holds the group at a time (group_busy_, under mu_). Locks nest in the order
// run_mu_ -> settle_mu_ -> mu_, and Cluster's mutex may be taken under mu_, never the other
// way (Cluster calls nothing of EpochRunner).
#ifndef REFIT_COORDINATOR_EPOCH_RUNNER_H_
#define REFIT_COORDINATOR_EPOCH_RUNNER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/cluster.h"
#include "coordinator/committed_versions.h"
#include "coordinator/destination_replicas.h"
#include "coordinator/epoch_members.h"
#include "coordinator/epoch_record.h"
#include "coordinator/held_replicas.h"
#include "coordinator/pause_round.h"
#include "coordinator/plan_slices.h"
#include "coordinator/replica_vetting.h"
#include "coordinator/winding_down.h"
#include "daemon/deadline.h"
#include "daemon/metrics.h"
#include "planner/planner.h"
#include "proto/refit.pb.h"

namespace refit::daemon {

class EpochRunner {
 public:
  // `metrics` may be null.
  EpochRunner(Cluster* cluster, v1::JobSpec job, CoordinatorMetrics* metrics = nullptr);
  // Waits for a preparation under way (PrepareSoon).
  ~EpochRunner();
  EpochRunner(const EpochRunner&) = delete;
  EpochRunner& operator=(const EpochRunner&) = delete;

  // Once every rank of the group is registered, sends each daemon its plan slice ahead of
  // the next epoch, so that the daemons set up between epochs what it needs (connections,
  // staging, shared-memory outbox: EpochExecutor::Prepare) and the first epoch costs what
  // a later one does. On a thread of the runner's own; calls made before it gets to them
  // count as one, and nothing is sent while an epoch holds the group (its Launch sends the
  // slices). The control streams call it when a rank registers. With destination
  // replicas, a replica complete but lacking the committed version catches up there
  // instead, while the sources still hold that version.
  void PrepareSoon() ABSL_LOCKS_EXCLUDED(prepare_mu_);

  // Says whether the caller gave up (a cancelled RPC); checked every 100 ms while waiting.
  using Cancelled = std::function<bool()>;

  // Runs the epoch of `version`, or answers a repeat of the committed version. Returns by
  // `timeout` (DEADLINE_EXCEEDED, also while another Refit holds the group), and soon after
  // `cancelled()` turns true (CANCELLED; a running epoch is aborted everywhere). A repeat
  // returns the committed report only while the destination ranks are the ones it was
  // committed to; otherwise the version is moved again if the sources still hold it, or
  // refused naming the reason.
  absl::StatusOr<v1::RefitReport> Refit(int64_t version, absl::Duration timeout,
                                        const Cancelled& cancelled = nullptr);

  // From the control streams.
  void OnDone(int32_t daemon, const v1::EpochDone& done);
  void OnProgress(int32_t daemon, const v1::EpochProgress& progress);
  void OnPaused(int32_t daemon, const v1::RanksPaused& paused) ABSL_LOCKS_EXCLUDED(mu_);
  void OnPrepared(int32_t daemon, const v1::SlicePrepared& prepared) ABSL_LOCKS_EXCLUDED(mu_);

  // Calls `emit` with the progress of `epoch_id` (empty: the running or next epoch; with
  // `version` > 0, the epoch moving that version: the running one, the next to start, or
  // the last one, which is then reported finished at once) each time it changes, until the
  // epoch finishes, `deadline` passes or `cancelled()` says so (checked every 100 ms);
  // false if no such epoch started.
  bool Watch(const std::string& epoch_id, absl::Time deadline,
             const std::function<bool(const v1::EpochProgress&)>& emit,
             const std::function<bool()>& cancelled, int64_t version = 0);
  // The daemon's session ended (`how`: what happened, for the error). An epoch it takes
  // part in fails, even when it has already reported: its ranks would miss the commit.
  void OnDaemonLost(int32_t daemon, const std::string& how);

  v1::StatusResponse Status() const;
  // With destination replicas: each replica with a rank registered or expected, and its
  // state (v1::ReplicaStatus); empty without.
  std::vector<v1::ReplicaStatus> Replicas() const ABSL_LOCKS_EXCLUDED(mu_);
  // Sets the replica gauges from the registrations now (ranks came or went).
  void UpdateReplicaGauges() ABSL_LOCKS_EXCLUDED(mu_);

  // Settles the daemons in doubt about an epoch (coordinator/in_doubt_resolution.h): sends each
  // the commit or abort, once it is known. Called after each hello, and when an epoch
  // ends; with `superseded` (a new epoch is about to write the buffers) one still
  // undecided is aborted.
  void SettleDaemonsInDoubt(bool superseded = false);

 private:
  // Sends each daemon of `snapshot` its slice of `plan` unless it holds it already; how many
  // it sent.
  absl::StatusOr<int> SendSlices(const ClusterSnapshot& snapshot, const v1::Plan& plan)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(run_mu_);
  // PrepareSoon's thread, and what it does each time it is woken.
  void PrepareLoop() ABSL_LOCKS_EXCLUDED(prepare_mu_);
  void PrepareGroup();
  // Plans the group as registered now and sends each daemon its slice (PrepareSoon).
  void SendPlanAhead() ABSL_EXCLUSIVE_LOCKS_REQUIRED(run_mu_);
  // Sends the slices, waits until every daemon prepared for its slice (AwaitPrepared),
  // then sends each the execute command; the daemons asked.
  absl::StatusOr<std::set<int32_t>> Launch(const ClusterSnapshot& snapshot, const v1::Plan& plan,
                                           const std::string& epoch_id, uint32_t number,
                                           int64_t version, Deadline deadline,
                                           const Cancelled& cancelled)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(run_mu_);
  // Waits (within `deadline`) until every daemon of `snapshot` said it prepared for its
  // slice of plan `digest` (or could not: the epoch then sets up what it needs), so that
  // no daemon's stall limit runs while a peer still creates its outbox; ends early when the
  // running epoch fails (a daemon lost) or the caller gives up.
  absl::Status AwaitPrepared(const ClusterSnapshot& snapshot, const std::string& digest,
                             Deadline deadline, const Cancelled& cancelled)
      ABSL_LOCKS_EXCLUDED(mu_);

  // The NCCL group for a plan whose GPU pieces cross daemons (none otherwise).
  absl::StatusOr<std::optional<v1::NcclSetup>> NcclSetupFor(const ClusterSnapshot& snapshot,
                                                            const v1::Plan& plan)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(run_mu_);

  // Takes the group for one Refit (one at a time) by `deadline`; false at the deadline or
  // on cancellation. Released by ReleaseGroup.
  bool TakeGroup(Deadline deadline, const Cancelled& cancelled);
  // The preparer's take: the group if it is free now; if a refit holds it, false, and that
  // refit prepares again when it ends (a replica completed meanwhile catches up then).
  bool TakeGroupOrPrepareLater() ABSL_LOCKS_EXCLUDED(mu_);
  void ReleaseGroup();
  // The part of Refit that runs while holding the group, step by step below.
  absl::StatusOr<v1::RefitReport> RefitHoldingGroup(int64_t version, absl::Duration start,
                                                    Deadline deadline, const Cancelled& cancelled)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(run_mu_);
  // Plans, launches and decides the epoch of `members` (snapshot: narrowed to them); with
  // destination replicas, again without those lost by a failed attempt while enough are
  // left (members shrinks).
  absl::StatusOr<v1::RefitReport> RunEpochs(int64_t version, absl::Duration start,
                                            Deadline deadline, const Cancelled& cancelled,
                                            ClusterSnapshot* snapshot, EpochMembers* members)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(run_mu_);

  // A plan for the group as registered now.
  struct PlannedEpoch {
    std::shared_ptr<const planner::Plan> plan;
    v1::Plan wire;
    std::vector<int64_t> planned_around;  // missing source ranks whose data others hold
  };
  // The replicas an epoch moving `version` writes: every complete one, or for a repeat of
  // the committed version those lacking it (the sources must still hold it); `snapshot`
  // narrowed to them. `*held`: the committed report, when every complete replica holds it.
  absl::StatusOr<EpochMembers> ChooseReplicas(int64_t version, ClusterSnapshot* snapshot,
                                              std::optional<v1::RefitReport>* held)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(run_mu_) ABSL_LOCKS_EXCLUDED(mu_);
  // Vets the complete replicas of `census` (coordinator/replica_vetting.h, each kind planned
  // alone for `version` when they differ), moving those held out into census->held;
  // remembers them (held_) and tells their ranks' daemons, once per registration and
  // reason, and again when a hold ends.
  void HoldMisdeclared(int64_t version, const ClusterSnapshot& snapshot, ReplicaCensus* census)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(run_mu_) ABSL_LOCKS_EXCLUDED(mu_);
  // When a daemon of `snapshot` reconnected (a new session, perhaps a new data-plane
  // address) or left since it was taken, takes it again (`*refreshed`), narrowed to the
  // members; with replicas, those with a rank gone or registered anew since are dropped
  // (FAILED_PRECONDITION when fewer than the members need are left).
  absl::Status RefreshIfStale(ClusterSnapshot* snapshot, EpochMembers* members, bool* refreshed);
  // Waits (within `deadline`) until no daemon of `snapshot` is still winding down the last
  // aborted epoch.
  void AwaitWoundDown(const ClusterSnapshot& snapshot, Deadline deadline,
                      const Cancelled& cancelled) ABSL_LOCKS_EXCLUDED(mu_);
  // After a failed epoch: the replicas of `replicas` it lost (a rank gone or registered
  // anew since `snapshot`, or a bucketed rank whose process stopped taking buckets), known
  // once every daemon of the epoch spoke since the failure or left (bounded by the lease
  // and `deadline`); ascending.
  std::vector<int64_t> LostReplicas(const ClusterSnapshot& snapshot,
                                    const std::vector<int64_t>& replicas, Deadline deadline)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Catches up complete replicas lacking the committed version, if any and the sources
  // still hold it; true if it ran an epoch. Holding the group.
  bool CatchUp() ABSL_EXCLUSIVE_LOCKS_REQUIRED(run_mu_);
  // Tells the engines of the destination ranks of `snapshot` registered with
  // pauses_for_writes that `version` is about to be written and waits for their daemons'
  // answers (up to the job's pause deadline, within `deadline`); returns the ranks whose
  // engines did not pause in time, and those of them whose daemon went away meanwhile (the
  // wait ends as soon as every daemon asked answered or went, or the caller gave up).
  // `*asked`: the ranks asked.
  PauseRound::Late PauseEngines(int64_t version, const ClusterSnapshot& snapshot, Deadline deadline,
                                const Cancelled& cancelled, std::vector<int64_t>* asked)
      ABSL_LOCKS_EXCLUDED(mu_);
  // How long an epoch waits for engines to pause (the job's pauseDeadlineMs).
  absl::Duration PauseDeadline() const;
  // The job's lease (leaseMs, 5 s by default).
  absl::Duration Lease() const;
  // Lets the engines of `ranks` resume without an epoch (SKIPPED, saying `why`).
  void ResumeEngines(const ClusterSnapshot& snapshot, const std::vector<int64_t>& ranks,
                     const std::string& why);
  // `status`, counted as a refit refused before any epoch, by `reason` (kRefusalReasons).
  absl::Status Refused(const char* reason, const absl::Status& status);
  // A repeat of the committed version: its report, a refusal, or nothing when the version
  // must be moved again (destination ranks registered since, sources still holding it).
  std::optional<absl::StatusOr<v1::RefitReport>> AnswerRepeat(int64_t version,
                                                              const ClusterSnapshot& snapshot)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Checks the group is complete enough and plans it (cached by layout digest). The
  // snapshot's sources become the layout as sent where destinations are quantized
  // (planner/quantization.h), and its quantized_sources the views the daemons quantize.
  absl::StatusOr<PlannedEpoch> PlanEpoch(int64_t version, ClusterSnapshot* snapshot)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(run_mu_);
  // Waits until every source rank published `version`.
  absl::Status AwaitPublishes(int64_t version, Deadline deadline, const Cancelled& cancelled);
  // Opens the record of a new epoch (phase distributing); its id and number.
  std::pair<std::string, uint32_t> StartEpoch(int64_t version, const v1::Plan& wire,
                                              const ClusterSnapshot& snapshot)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Waits for every report (unless the launch failed), compares the checksums and commits
  // or aborts the record, all under one hold of mu_, so a daemon lost meanwhile either
  // fails the epoch or comes after the decision. The outcome (OK: committed), and how many
  // views and pieces were checksummed.
  absl::Status Decide(absl::Status launched, Deadline deadline, const Cancelled& cancelled,
                      const ClusterSnapshot& snapshot, const v1::Plan& wire,
                      std::pair<int64_t, int64_t>* checksummed) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status AwaitExecutionLocked(Deadline deadline, const Cancelled& cancelled)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<std::pair<int64_t, int64_t>> VerifyLocked(const ClusterSnapshot& snapshot,
                                                           const v1::Plan& wire)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends the decided outcome to every daemon of the epoch, then settles those in doubt.
  // `retried`: an abort after which the version is moved again at once.
  void TellDaemons(const std::string& epoch_id, int64_t version, const absl::Status& outcome,
                   const ClusterSnapshot& snapshot, bool retried = false) ABSL_LOCKS_EXCLUDED(mu_);
  // The report of a committed epoch, remembered for repeats and Status (a catch-up adds
  // its replicas to the report of the version it caught up to).
  v1::RefitReport Report(const PlannedEpoch& planned, const EpochMembers& members,
                         const ClusterSnapshot& snapshot, std::pair<int64_t, int64_t> checksummed,
                         double seconds, double epoch_seconds) ABSL_LOCKS_EXCLUDED(mu_);

  Cluster* cluster_;
  const v1::JobSpec job_;
  CoordinatorMetrics* metrics_;
  const std::optional<DestinationReplicas> replicas_;  // with job_.destination_replicas
  planner::PlanCache plans_;
  // Taken only by the holder of the group (group_busy_).
  absl::Mutex run_mu_ ABSL_ACQUIRED_BEFORE(settle_mu_, mu_);
  // The NCCL members last set up and their unique id.
  std::string nccl_members_ ABSL_GUARDED_BY(run_mu_);
  std::string nccl_unique_id_ ABSL_GUARDED_BY(run_mu_);
  // What each daemon's last slice held, and the session it went to.
  SlicesSent slices_sent_ ABSL_GUARDED_BY(run_mu_);

  mutable absl::Mutex mu_;
  uint32_t next_epoch_ ABSL_GUARDED_BY(mu_) = 1;
  // The running epoch, or when none runs the last one (empty before the first launch).
  std::optional<EpochRecord> epoch_ ABSL_GUARDED_BY(mu_);
  // How the last decided epoch ended, for watchers of it while the next one runs.
  struct FinishedEpoch {
    int64_t version = -1;
    v1::EpochProgress progress;
  };
  std::optional<FinishedEpoch> finished_ ABSL_GUARDED_BY(mu_);
  // Changes each time a watcher may see something new (epoch_ started, progressed, ended).
  int64_t progress_events_ ABSL_GUARDED_BY(mu_) = 0;
  CommittedVersions committed_ ABSL_GUARDED_BY(mu_);
  absl::Mutex settle_mu_ ABSL_ACQUIRED_BEFORE(mu_);  // one SettleDaemonsInDoubt at a time
  absl::Mutex prepare_mu_;
  bool prepare_wanted_ ABSL_GUARDED_BY(prepare_mu_) = false;
  bool preparer_exit_ ABSL_GUARDED_BY(prepare_mu_) = false;
  std::thread preparer_;  // started by the first PrepareSoon
  bool group_busy_ ABSL_GUARDED_BY(mu_) = false;
  int64_t group_version_ ABSL_GUARDED_BY(mu_) = -1;           // what the group's holder refits
  std::set<int64_t> catching_up_ ABSL_GUARDED_BY(mu_);        // replicas a catch-up moves now
  std::set<int64_t> replicas_exported_ ABSL_GUARDED_BY(mu_);  // in the per-replica gauge
  // The pause round under way (PauseEngines).
  std::optional<PauseRound> pause_ ABSL_GUARDED_BY(mu_);
  // The daemons still winding down the last aborted epoch (AwaitWoundDown waits for them).
  WindingDown winding_down_ ABSL_GUARDED_BY(mu_);
  int64_t pause_rounds_ ABSL_GUARDED_BY(mu_) = 0;
  // Replicas an epoch skipped or dropped: they catch up once the group is free.
  bool catch_up_wanted_ ABSL_GUARDED_BY(mu_) = false;
  // Complete replicas the last vetting held out (HoldMisdeclared).
  HeldReplicas held_ ABSL_GUARDED_BY(mu_);
  // The last vetting of the replicas (HoldMisdeclared) and what it read: the destination
  // registrations of the replicas it vetted and the source registrations.
  using VettedRegistrations = std::pair<std::map<int64_t, uint64_t>, std::map<int64_t, uint64_t>>;
  std::optional<std::pair<VettedRegistrations, ReplicaVetting>> last_vetting_
      ABSL_GUARDED_BY(run_mu_);
  // Per daemon, the plan digest of the last slice it said it prepared for, in its current
  // control session (forgotten when the session ends).
  std::map<int32_t, std::string> prepared_ ABSL_GUARDED_BY(mu_);
};

}  // namespace refit::daemon

#endif  // REFIT_COORDINATOR_EPOCH_RUNNER_H_

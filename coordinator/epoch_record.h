// One epoch as the coordinator follows it from launch to outcome: the daemons asked, the
// reports still awaited, what the reports carried (checksums, timings, bytes delivered) and
// the first failure, in explicit phases
//   distributing -> executing -> verifying -> committed
//        \______________\____________\_____-> aborted
// Plain data, no locks and no gRPC: EpochRunner holds the running (or last) epoch's record
// under its mutex, and the transitions are tested on their own.
#ifndef REFIT_COORDINATOR_EPOCH_RECORD_H_
#define REFIT_COORDINATOR_EPOCH_RECORD_H_

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "proto/refit.pb.h"

namespace refit::daemon {

enum class EpochPhase {
  kDistributing,  // slices and execute commands being sent
  kExecuting,     // every daemon asked; reports awaited
  kVerifying,     // every daemon reported success; checksums being compared
  kCommitted,
  kAborted,
};
absl::string_view EpochPhaseName(EpochPhase phase);

class EpochRecord {
 public:
  // Names a daemon by index, for errors ("train-node-0").
  using NodeName = std::function<std::string(int32_t daemon)>;

  // An epoch moving `version` on `daemons`, whose destination views receive `bytes_total`.
  EpochRecord(std::string id, int64_t version, std::set<int32_t> daemons, int64_t bytes_total);

  const std::string& id() const { return id_; }
  int64_t version() const { return version_; }
  EpochPhase phase() const { return phase_; }
  bool running() const {
    return phase_ != EpochPhase::kCommitted && phase_ != EpochPhase::kAborted;
  }
  int64_t bytes_total() const { return bytes_total_; }

  // Transitions; each refuses (FAILED_PRECONDITION, naming both phases) to leave a phase it
  // does not leave, and changes nothing then.
  // distributing -> executing: every daemon was sent its command.
  absl::Status Launched();
  // executing -> verifying: every daemon reported success (Settled() and failure() OK).
  absl::Status Verifying();
  // verifying -> committed; refused with the failure's own kind if one came meanwhile (a
  // daemon lost: its ranks would miss the commit).
  absl::Status Commit();
  // Any running phase -> aborted.
  absl::Status Abort();

  // Reports and losses, while running (ignored otherwise: a stale report). The first
  // failure is kept; a failed report's kind survives (DaemonFailure).
  void OnDone(int32_t daemon, const std::string& node, const v1::EpochDone& done);
  void OnProgress(int32_t daemon, int64_t bytes_done);
  // A daemon of this epoch lost its session: its ranks would miss the commit.
  void OnDaemonLost(int32_t daemon, absl::Status why);
  // The caller gave up, or a step of the coordinator failed.
  void Fail(absl::Status why);

  // Every daemon reported, or the epoch failed: nothing more to wait for.
  bool Settled() const { return awaiting_.empty() || !failure_.ok(); }
  // The daemons that have not reported on the epoch (after an abort: those still winding
  // their part down).
  const std::set<int32_t>& awaiting() const { return awaiting_; }
  // How execution ended once the wait is over: the first failure, else the daemons that had
  // not reported (DEADLINE_EXCEEDED naming them), else OK. Prefixed with the epoch id.
  absl::Status ExecutionOutcome(const NodeName& node_name) const;

  // The bucketed destination ranks whose processes stopped taking buckets, as the daemons
  // reported (also after the epoch was decided).
  const std::set<int64_t>& stalled_destinations() const { return stalled_destinations_; }

  const std::vector<v1::ViewChecksum>& view_checksums() const { return view_checksums_; }
  const std::vector<v1::PieceChecksum>& piece_checksums() const { return piece_checksums_; }

  // The slowest daemon and destination rank by their own report (-1: none reported).
  std::pair<int32_t, double> SlowestDaemon() const;
  std::pair<int64_t, double> SlowestRank() const;

  // What a watcher sees now.
  v1::EpochProgress Progress() const;

 private:
  absl::Status Move(EpochPhase from, EpochPhase to);

  const std::string id_;
  const int64_t version_;
  const std::set<int32_t> daemons_;
  const int64_t bytes_total_;
  EpochPhase phase_ = EpochPhase::kDistributing;
  std::set<int32_t> awaiting_;
  absl::Status failure_;
  std::map<int32_t, int64_t> delivered_;
  std::vector<v1::ViewChecksum> view_checksums_;
  std::vector<v1::PieceChecksum> piece_checksums_;
  std::map<int32_t, double> daemon_seconds_;
  std::map<int64_t, double> rank_finish_seconds_;
  std::set<int64_t> stalled_destinations_;
};

// A daemon's failed epoch as the client will see it: the daemon's own kind of failure
// (DEADLINE_EXCEEDED for a stalled link, DATA_LOSS for a short message...), except that an
// epoch the daemon saw interrupted (CANCELLED: the coordinator aborted it, or refitd is
// stopping) was not cancelled by the caller, so it is ABORTED, as is a failure of unknown
// kind.
absl::Status DaemonFailure(const std::string& node, const v1::EpochDone& done);

}  // namespace refit::daemon

#endif  // REFIT_COORDINATOR_EPOCH_RECORD_H_

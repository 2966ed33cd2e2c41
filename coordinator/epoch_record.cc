#include "coordinator/epoch_record.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace refit::daemon {

absl::string_view EpochPhaseName(EpochPhase phase) {
  switch (phase) {
    case EpochPhase::kDistributing:
      return "distributing";
    case EpochPhase::kExecuting:
      return "executing";
    case EpochPhase::kVerifying:
      return "verifying";
    case EpochPhase::kCommitted:
      return "committed";
    case EpochPhase::kAborted:
      return "aborted";
  }
  return "unknown";
}

absl::Status DaemonFailure(const std::string& node, const v1::EpochDone& done) {
  absl::StatusCode code = absl::StatusCode::kAborted;
  if (done.code() > 0 && done.code() <= static_cast<int>(absl::StatusCode::kUnauthenticated) &&
      done.code() != static_cast<int>(absl::StatusCode::kCancelled)) {
    code = static_cast<absl::StatusCode>(done.code());
  }
  return absl::Status(code, absl::StrCat("refitd on ", node, " failed: ", done.error()));
}

EpochRecord::EpochRecord(std::string id, int64_t version, std::set<int32_t> daemons,
                         int64_t bytes_total)
    : id_(std::move(id)),
      version_(version),
      daemons_(std::move(daemons)),
      bytes_total_(bytes_total),
      awaiting_(daemons_) {}

absl::Status EpochRecord::Move(EpochPhase from, EpochPhase to) {
  if (phase_ != from) {
    return absl::FailedPreconditionError(absl::StrCat(
        "epoch ", id_, " cannot move to ", EpochPhaseName(to), " while ", EpochPhaseName(phase_)));
  }
  phase_ = to;
  return absl::OkStatus();
}

absl::Status EpochRecord::Launched() {
  return Move(EpochPhase::kDistributing, EpochPhase::kExecuting);
}

absl::Status EpochRecord::Verifying() {
  if (phase_ == EpochPhase::kExecuting && (!awaiting_.empty() || !failure_.ok())) {
    return absl::FailedPreconditionError(
        absl::StrCat("epoch ", id_,
                     " cannot be verified: ", failure_.ok() ? "reports are missing" : "it failed"));
  }
  return Move(EpochPhase::kExecuting, EpochPhase::kVerifying);
}

absl::Status EpochRecord::Commit() {
  if (phase_ == EpochPhase::kVerifying && !failure_.ok()) {
    return absl::Status(
        failure_.code(),
        absl::StrCat("epoch ", id_, " failed while verified: ", failure_.message()));
  }
  return Move(EpochPhase::kVerifying, EpochPhase::kCommitted);
}

absl::Status EpochRecord::Abort() {
  if (!running()) {
    return absl::FailedPreconditionError(
        absl::StrCat("epoch ", id_, " cannot be aborted: it is ", EpochPhaseName(phase_)));
  }
  phase_ = EpochPhase::kAborted;
  return absl::OkStatus();
}

void EpochRecord::OnDone(int32_t daemon, const std::string& node, const v1::EpochDone& done) {
  // Whose process stopped draining is worth knowing also from a report after the decision.
  if (awaiting_.count(daemon)) {
    stalled_destinations_.insert(done.stalled_destination_ranks().begin(),
                                 done.stalled_destination_ranks().end());
  }
  if (!running() || !awaiting_.erase(daemon)) return;
  if (!done.ok()) {
    if (failure_.ok()) failure_ = DaemonFailure(node, done);
    return;
  }
  view_checksums_.insert(view_checksums_.end(), done.checksums().begin(), done.checksums().end());
  piece_checksums_.insert(piece_checksums_.end(), done.pieces().begin(), done.pieces().end());
  daemon_seconds_[daemon] = done.seconds();
  for (const v1::RankFinish& finish : done.finished()) {
    // Pieces of one rank may come from several daemons (same-host ones write straight).
    double& latest = rank_finish_seconds_[finish.rank()];
    latest = std::max(latest, finish.seconds());
  }
}

void EpochRecord::OnProgress(int32_t daemon, int64_t bytes_done) {
  if (running() && daemons_.count(daemon)) delivered_[daemon] = bytes_done;
}

void EpochRecord::OnDaemonLost(int32_t daemon, absl::Status why) {
  if (daemons_.count(daemon)) Fail(std::move(why));
}

void EpochRecord::Fail(absl::Status why) {
  if (running() && failure_.ok()) failure_ = std::move(why);
}

absl::Status EpochRecord::ExecutionOutcome(const NodeName& node_name) const {
  if (!failure_.ok()) {
    return absl::Status(failure_.code(), absl::StrCat("epoch ", id_, ": ", failure_.message()));
  }
  if (awaiting_.empty()) return absl::OkStatus();
  std::vector<std::string> late;
  for (int32_t daemon : awaiting_) late.push_back(node_name(daemon));
  return absl::DeadlineExceededError(absl::StrCat("epoch ", id_, ": refitd on ",
                                                  absl::StrJoin(late, ", "),
                                                  " did not finish before the deadline"));
}

std::pair<int32_t, double> EpochRecord::SlowestDaemon() const {
  std::pair<int32_t, double> slowest{-1, 0.0};
  for (const auto& [daemon, seconds] : daemon_seconds_) {
    if (seconds >= slowest.second) slowest = {daemon, seconds};
  }
  return slowest;
}

std::pair<int64_t, double> EpochRecord::SlowestRank() const {
  std::pair<int64_t, double> slowest{-1, 0.0};
  for (const auto& [rank, seconds] : rank_finish_seconds_) {
    if (seconds >= slowest.second) slowest = {rank, seconds};
  }
  return slowest;
}

v1::EpochProgress EpochRecord::Progress() const {
  v1::EpochProgress progress;
  progress.set_epoch_id(id_);
  progress.set_finished(!running());
  progress.set_committed(phase_ == EpochPhase::kCommitted);
  progress.set_bytes_total(bytes_total_);
  int64_t done = 0;
  for (const auto& [daemon, bytes] : delivered_) done += bytes;
  progress.set_bytes_done(phase_ == EpochPhase::kCommitted ? bytes_total_ : done);
  return progress;
}

}  // namespace refit::daemon

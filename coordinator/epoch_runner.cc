#include "coordinator/epoch_runner.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "coordinator/piece_checksums.h"
#include "coordinator/plan_slices.h"
#include "coordinator/view_checksums.h"
#include "daemon/cancellable_wait.h"
#include "daemon/monotonic_clock.h"
#include "planner/layout.h"
#include "planner/plan_proto.h"
#include "planner/quantization.h"
#include "planner/topology.h"
#include "spdlog/spdlog.h"
#include "transport/gpu/nccl_group.h"
#include "transport/gpu/nccl_members.h"
#include "transport/rank_placement.h"

namespace refit::daemon {
namespace {

// "; missing source ranks 3, 5" (at most 16 named), or "" when none is missing.
std::string MissingRanks(const v1::LayoutSpec& registered, int64_t expected, const char* side) {
  std::set<int64_t> present;
  for (const v1::RankLayout& rank : registered.ranks()) present.insert(rank.rank());
  std::vector<int64_t> missing;
  for (int64_t rank = 0; rank < expected; ++rank) {
    if (!present.count(rank)) missing.push_back(rank);
  }
  if (missing.empty()) return "";
  const size_t named = std::min<size_t>(missing.size(), 16);
  return absl::StrCat("; missing ", side, " ranks ",
                      absl::StrJoin(missing.begin(), missing.begin() + named, ", "),
                      named < missing.size() ? ", ..." : "");
}

// Rank -> registration, of the cluster's destination ranks.
std::map<int64_t, uint64_t> RegistrationsOf(
    const std::map<int64_t, Cluster::DestinationRank>& ranks) {
  std::map<int64_t, uint64_t> registrations;
  for (const auto& [rank, holder] : ranks) registrations[rank] = holder.registration;
  return registrations;
}

// The ranks `registrations` names.
std::set<int64_t> RanksIn(const std::map<int64_t, uint64_t>& registrations) {
  std::set<int64_t> ranks;
  for (const auto& [rank, registration] : registrations) ranks.insert(rank);
  return ranks;
}

// The message that settles an epoch on a daemon: commit it, or abort it saying why.
v1::CoordinatorMessage OutcomeMessage(const std::string& epoch_id, int64_t version, bool committed,
                                      absl::string_view abort_reason) {
  v1::CoordinatorMessage message;
  if (committed) {
    message.mutable_commit()->set_epoch_id(epoch_id);
    message.mutable_commit()->set_version(version);
  } else {
    message.mutable_abort()->set_epoch_id(epoch_id);
    message.mutable_abort()->set_version(version);
    message.mutable_abort()->set_reason(std::string(abort_reason));
  }
  return message;
}

}  // namespace

absl::StatusOr<std::optional<v1::NcclSetup>> EpochRunner::NcclSetupFor(
    const ClusterSnapshot& snapshot, const v1::Plan& plan) {
  std::optional<v1::NcclSetup> setup = transport::gpu::NcclMembers(snapshot.placement, plan);
  if (!setup.has_value()) return std::nullopt;
  std::string key;
  for (const v1::NcclMember& member : setup->members()) {
    absl::StrAppend(&key, member.daemon(), ":", member.device(), ",");
  }
  // The same members keep their communicator across epochs; new members get a new one.
  if (key != nccl_members_) {
    absl::StatusOr<std::string> id = transport::gpu::NcclGroup::NewUniqueId();
    if (!id.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("GPU pieces cross daemons but the coordinator cannot create an NCCL group: ",
                       id.status().message()));
    }
    nccl_members_ = key;
    nccl_unique_id_ = *id;
  }
  setup->set_unique_id(nccl_unique_id_);
  return setup;
}

absl::StatusOr<int> EpochRunner::SendSlices(const ClusterSnapshot& snapshot, const v1::Plan& plan) {
  const transport::RankPlacement where = WhereRanksAre(snapshot);
  absl::StatusOr<std::optional<v1::NcclSetup>> nccl = NcclSetupFor(snapshot, plan);
  if (!nccl.ok()) return nccl.status();
  const std::string key = SliceKey(snapshot, plan, *nccl);
  std::optional<ViewKeySet> compared;  // computed when a slice is sent
  int sent = 0;
  for (const auto& [index, channel] : snapshot.channels) {
    if (!slices_sent_.Lacks(index, channel, key)) continue;
    if (!compared.has_value()) {
      compared = ComparedViews(snapshot.sources, snapshot.destinations, plan.ordered_batches());
    }
    slices_sent_.Forget(index);
    if (!channel->Send(SliceFor(snapshot, plan, where, index, *nccl, *compared))) {
      return absl::UnavailableError(absl::StrCat("refitd on ", cluster_->NodeOf(index),
                                                 " is unreachable (its stream ended)"));
    }
    slices_sent_.Sent(index, channel, key);
    ++sent;
  }
  return sent;
}

absl::StatusOr<std::set<int32_t>> EpochRunner::Launch(const ClusterSnapshot& snapshot,
                                                      const v1::Plan& plan,
                                                      const std::string& epoch_id, uint32_t number,
                                                      int64_t version, Deadline deadline,
                                                      const Cancelled& cancelled) {
  if (absl::StatusOr<int> sent = SendSlices(snapshot, plan); !sent.ok()) return sent.status();
  if (absl::Status prepared = AwaitPrepared(snapshot, plan.digest(), deadline, cancelled);
      !prepared.ok()) {
    return prepared;
  }
  std::set<int32_t> asked;
  for (const auto& [index, channel] : snapshot.channels) {
    v1::CoordinatorMessage execute_message;
    v1::ExecuteEpoch* execute = execute_message.mutable_execute();
    execute->set_epoch_id(epoch_id);
    execute->set_version(version);
    execute->set_plan_digest(plan.digest());
    execute->set_deadline_ms(absl::ToInt64Milliseconds(deadline.Left()));
    execute->set_epoch_number(number);
    execute->set_checksums(!job_.skip_checksums());
    execute->set_stall_ms(job_.data_plane_stall_ms());
    execute->set_source_replica_check_epochs(job_.source_replica_check_epochs() > 0
                                                 ? job_.source_replica_check_epochs()
                                                 : kDefaultSourceReplicaCheckEpochs);
    if (!channel->Send(execute_message)) {
      return absl::UnavailableError(absl::StrCat("refitd on ", cluster_->NodeOf(index),
                                                 " is unreachable (its stream ended)"));
    }
    asked.insert(index);
  }
  return asked;
}

absl::Status EpochRunner::AwaitPrepared(const ClusterSnapshot& snapshot, const std::string& digest,
                                        Deadline deadline, const Cancelled& cancelled) {
  const absl::Duration start = MonotonicNow();
  std::vector<int32_t> waiting;
  {
    absl::MutexLock lock(&mu_);
    auto unprepared = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      std::vector<int32_t> waiting;
      for (const auto& [index, channel] : snapshot.channels) {
        auto it = prepared_.find(index);
        if (it == prepared_.end() || it->second != digest) waiting.push_back(index);
      }
      return waiting;
    };
    auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return unprepared().empty() || (epoch_ && epoch_->Settled());
    };
    AwaitCancellable(mu_, absl::Condition(&done), deadline.ToTime(), cancelled);
    waiting = unprepared();
    // A failed epoch's failure is the outcome.
    if (!waiting.empty() && epoch_ && epoch_->Settled()) return absl::OkStatus();
  }
  if (waiting.empty()) {
    const absl::Duration waited = MonotonicNow() - start;
    if (waited > absl::Seconds(1)) {
      spdlog::info("plan {}: the daemons took {:.3f} s to prepare for their slices", digest,
                   absl::ToDoubleSeconds(waited));
    }
    return absl::OkStatus();
  }
  std::vector<std::string> nodes;
  for (int32_t index : waiting) nodes.push_back(cluster_->NodeOf(index));
  const std::string who =
      absl::StrCat("refitd on ", absl::StrJoin(nodes, ", "), " had not prepared for plan ", digest);
  if (cancelled && cancelled())
    return absl::CancelledError(absl::StrCat(who, " when the caller cancelled"));
  return absl::DeadlineExceededError(absl::StrCat(who, " by the deadline"));
}

void EpochRunner::OnPrepared(int32_t daemon, const v1::SlicePrepared& prepared) {
  if (!prepared.ok()) {
    spdlog::warn("refitd on {} could not prepare for plan {} (its epoch sets up what it needs): {}",
                 cluster_->NodeOf(daemon), prepared.plan_digest(), prepared.error());
  }
  absl::MutexLock lock(&mu_);
  prepared_[daemon] = prepared.plan_digest();
}

EpochRunner::~EpochRunner() {
  {
    absl::MutexLock lock(&prepare_mu_);
    preparer_exit_ = true;
  }
  if (preparer_.joinable()) preparer_.join();
}

void EpochRunner::PrepareSoon() {
  absl::MutexLock lock(&prepare_mu_);
  prepare_wanted_ = true;
  if (!preparer_.joinable()) preparer_ = std::thread([this]() { PrepareLoop(); });
}

void EpochRunner::PrepareLoop() {
  while (true) {
    {
      absl::MutexLock lock(&prepare_mu_);
      auto woken = [this]() ABSL_SHARED_LOCKS_REQUIRED(prepare_mu_) {
        return prepare_wanted_ || preparer_exit_;
      };
      prepare_mu_.Await(absl::Condition(&woken));
      if (preparer_exit_) return;
      prepare_wanted_ = false;
    }
    PrepareGroup();
  }
}

void EpochRunner::PrepareGroup() {
  // Not while an epoch holds the group (its Launch sends the slices), and only for a group
  // as complete as an epoch needs it (a partial one plans around missing sources).
  if (cluster_->RankCount(v1::ROLE_SOURCE) < job_.source_ranks() ||
      (!replicas_.has_value() &&
       cluster_->RankCount(v1::ROLE_DESTINATION) < job_.destination_ranks()) ||
      !TakeGroupOrPrepareLater()) {
    return;
  }
  {
    absl::MutexLock run_lock(&run_mu_);  // never contended: the group is ours
    if (!replicas_.has_value() || !CatchUp()) SendPlanAhead();
  }
  ReleaseGroup();
}

void EpochRunner::SendPlanAhead() {
  int64_t version;
  {
    absl::MutexLock lock(&mu_);
    version = committed_.current();
  }
  std::string sent_ahead;  // the plan's digest once sent
  absl::StatusOr<int> sent = absl::UnknownError("not planned");
  absl::StatusOr<ClusterSnapshot> snapshot = cluster_->Snapshot(replicas_.has_value());
  if (snapshot.ok() && replicas_.has_value()) {
    // The replicas complete now and fit, if enough are.
    ReplicaCensus census = replicas_->Census(RanksIn(snapshot->destination_registrations));
    HoldMisdeclared(version, *snapshot, &census);
    if (!replicas_->CheckEnough(census).ok()) return;
    NarrowDestinations(replicas_->RanksOf(census.complete), &*snapshot);
  }
  if (!snapshot.ok()) {
    sent = snapshot.status();
  } else if (absl::StatusOr<PlannedEpoch> planned = PlanEpoch(version, &*snapshot); !planned.ok()) {
    sent = planned.status();
  } else {
    sent = SendSlices(*snapshot, planned->wire);
    sent_ahead = planned->wire.digest();
  }
  if (!sent.ok()) {
    spdlog::info(
        "the refit group is complete, but its plan was not sent ahead (the next epoch tries "
        "again): {}",
        std::string(sent.status().message()));
  } else if (*sent > 0) {
    spdlog::info(
        "the refit group is complete: plan {} sent ahead of the next epoch to {} of its {} "
        "daemons (the others hold it)",
        sent_ahead, *sent, snapshot->channels.size());
  }
}

bool EpochRunner::TakeGroup(Deadline deadline, const Cancelled& cancelled) {
  absl::MutexLock lock(&mu_);
  auto group_free = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !group_busy_; };
  if (!AwaitCancellable(mu_, absl::Condition(&group_free), deadline.ToTime(), cancelled)) {
    return false;
  }
  group_busy_ = true;
  return true;
}

bool EpochRunner::TakeGroupOrPrepareLater() {
  absl::MutexLock lock(&mu_);
  if (group_busy_) {
    catch_up_wanted_ = true;  // in the same critical section: the holder cannot miss it
    return false;
  }
  group_busy_ = true;
  return true;
}

void EpochRunner::ReleaseGroup() {
  absl::MutexLock lock(&mu_);
  group_busy_ = false;
  group_version_ = -1;
}

absl::StatusOr<v1::RefitReport> EpochRunner::Refit(int64_t version, absl::Duration timeout,
                                                   const Cancelled& cancelled) {
  const absl::Duration start = MonotonicNow();
  const Deadline deadline = Deadline::In(timeout);
  if (!TakeGroup(deadline, cancelled)) {
    absl::MutexLock lock(&mu_);
    const std::string holder = absl::StrCat("a refit of version ", group_version_);
    if (cancelled && cancelled()) {
      return Refused("cancelled", absl::CancelledError(
                                      absl::StrCat("the refit of version ", version,
                                                   " was cancelled while waiting for ", holder)));
    }
    return Refused("waited_for_another", absl::DeadlineExceededError(absl::StrCat(
                                             "the refit of version ", version, " waited for ",
                                             holder, " until its own deadline")));
  }
  {
    absl::MutexLock lock(&mu_);
    group_version_ = version;
  }
  absl::StatusOr<v1::RefitReport> report;
  {
    absl::MutexLock run_lock(&run_mu_);  // never contended: the group is ours
    report = RefitHoldingGroup(version, start, deadline, cancelled);
  }
  ReleaseGroup();
  bool catch_up = false;
  {
    absl::MutexLock lock(&mu_);
    std::swap(catch_up, catch_up_wanted_);
  }
  if (catch_up) PrepareSoon();  // replicas skipped or dropped catch up if they can
  return report;
}

absl::StatusOr<v1::RefitReport> EpochRunner::RefitHoldingGroup(int64_t version,
                                                               absl::Duration start,
                                                               Deadline deadline,
                                                               const Cancelled& cancelled) {
  {
    absl::MutexLock lock(&mu_);
    // A restarted coordinator learns the committed version from the daemons.
    committed_.Recover(cluster_->CommittedVersion());
    if (absl::Status newer = committed_.CheckNotOlder(version); !newer.ok()) {
      return Refused("stale_version", newer);
    }
  }
  absl::StatusOr<ClusterSnapshot> snapshot = cluster_->Snapshot(replicas_.has_value());
  if (!snapshot.ok()) return Refused("group_disagrees", snapshot.status());
  EpochMembers members;
  if (replicas_.has_value()) {
    std::optional<v1::RefitReport> held;
    absl::StatusOr<EpochMembers> chosen = ChooseReplicas(version, &*snapshot, &held);
    if (held.has_value()) return *std::move(held);
    if (!chosen.ok()) return chosen.status();  // counted as refused there
    members = *std::move(chosen);
  } else if (std::optional<absl::StatusOr<v1::RefitReport>> repeat =
                 AnswerRepeat(version, *snapshot)) {
    // A version committed before that the sources no longer hold is as stale as an older one.
    if (!repeat->ok()) return Refused("stale_version", repeat->status());
    return *std::move(repeat);
  }
  if (members.catch_up()) {
    absl::MutexLock lock(&mu_);
    catching_up_.insert(members.replicas().begin(), members.replicas().end());
  }
  absl::StatusOr<v1::RefitReport> report =
      RunEpochs(version, start, deadline, cancelled, &*snapshot, &members);
  {
    absl::MutexLock lock(&mu_);
    catching_up_.clear();
  }
  UpdateReplicaGauges();
  if (members.catch_up() && metrics_ != nullptr) {
    metrics_->catch_ups.Add({{"result", report.ok() ? "committed" : "aborted"}}).Increment();
  }
  return report;
}

absl::StatusOr<v1::RefitReport> EpochRunner::RunEpochs(int64_t version, absl::Duration start,
                                                       Deadline deadline,
                                                       const Cancelled& cancelled,
                                                       ClusterSnapshot* snapshot,
                                                       EpochMembers* members) {
  std::vector<int64_t> paused;  // ranks whose engines wait for this refit's epoch
  // A refit that ends before its epoch lets the engines it paused resume.
  auto end_before_epoch = [&](const char* reason, const absl::Status& status) {
    if (!paused.empty()) ResumeEngines(*snapshot, paused, std::string(status.message()));
    return Refused(reason, status);
  };
  while (true) {
    absl::StatusOr<PlannedEpoch> planned = PlanEpoch(version, snapshot);
    if (!planned.ok()) {
      const absl::StatusCode code = planned.status().code();
      return end_before_epoch(code == absl::StatusCode::kFailedPrecondition ? "incomplete_group"
                              : code == absl::StatusCode::kInvalidArgument  ? "invalid_layout"
                                                                            : "other",
                              planned.status());
    }
    // Planned while the trainers may still be finishing the step; now wait (within the
    // deadline) for every source rank to publish this version, so no half-updated weights
    // are sent.
    if (absl::Status published = AwaitPublishes(version, deadline, cancelled); !published.ok()) {
      return end_before_epoch(
          published.code() == absl::StatusCode::kCancelled ? "cancelled" : "not_published",
          published);
    }
    // Engines that pause for writes are told now; a replica whose engines did not pause in
    // time is left out of this epoch (it catches up afterwards).
    std::vector<int64_t> asked;
    const PauseRound::Late late = PauseEngines(version, *snapshot, deadline, cancelled, &asked);
    paused = asked;
    if (cancelled && cancelled()) {
      return end_before_epoch(
          "cancelled",
          absl::CancelledError(absl::StrCat("the refit of version ", version,
                                            " was cancelled while waiting for engines to pause")));
    }
    if (!late.ranks.empty()) {
      const LateEngines left_out = LeaveOutLate(version, late, asked, members->replicas(),
                                                replicas_.has_value() ? &*replicas_ : nullptr,
                                                members->needed(), PauseDeadline());
      if (!left_out.refusal.ok()) return end_before_epoch("engines_not_paused", left_out.refusal);
      const std::vector<int64_t>& lost = left_out.dropped;
      const std::vector<int64_t>& skipped = left_out.skipped;
      spdlog::warn("version {}: {}; {}{}{}", version, left_out.what,
                   lost.empty() ? "" : absl::StrCat("dropping ", DescribeReplicas(lost)),
                   !lost.empty() && !skipped.empty() ? ", " : "",
                   skipped.empty() ? "" : absl::StrCat("skipping ", DescribeReplicas(skipped)));
      if (metrics_ != nullptr && !lost.empty()) metrics_->replicas_dropped.Increment(lost.size());
      ResumeEngines(*snapshot, left_out.resumed,
                    absl::StrCat(left_out.what, ": skipped for this epoch"));
      members->Drop(lost);
      members->Skip(skipped);
      NarrowDestinations(replicas_->RanksOf(members->replicas()), snapshot);
      continue;  // planned again for the others, whose engines stay paused
    }
    // The epoch writes the buffers of daemons still in doubt about an older one: that one
    // is over for them.
    SettleDaemonsInDoubt(/*superseded=*/true);
    AwaitWoundDown(*snapshot, deadline, cancelled);
    // Planned from a snapshot a reconnection made stale (a daemon that replaced its UCX
    // worker has a new address): taken and planned again.
    bool refreshed = false;
    if (absl::Status fresh = RefreshIfStale(snapshot, members, &refreshed); !fresh.ok()) {
      return end_before_epoch("incomplete_group", fresh);
    }
    if (refreshed && deadline.Passed()) {
      return end_before_epoch("other", absl::DeadlineExceededError(absl::StrCat(
                                           "the refit of version ", version,
                                           " was planned again (daemons reconnected) until its "
                                           "deadline")));
    }
    if (refreshed) continue;
    const absl::Duration epoch_start = MonotonicNow();
    const auto [epoch_id, number] = StartEpoch(version, planned->wire, *snapshot);
    const absl::Status launched =
        Launch(*snapshot, planned->wire, epoch_id, number, version, deadline, cancelled).status();
    std::pair<int64_t, int64_t> checksummed{0, 0};
    const absl::Status outcome =
        Decide(launched, deadline, cancelled, *snapshot, planned->wire, &checksummed);
    // A replica lost during the epoch is dropped and the others take the version in an
    // epoch of their own, if enough of them are left and time is.
    std::vector<int64_t> lost;
    if (!outcome.ok() && replicas_.has_value() && !(cancelled && cancelled())) {
      lost = LostReplicas(*snapshot, members->replicas(), deadline);
    }
    const bool retried = !lost.empty() && members->EnoughWithout(lost) && !deadline.Passed();
    const absl::Duration end = MonotonicNow();
    const double seconds = absl::ToDoubleSeconds(end - start);
    // A commit is recorded (the version, who holds it) before any daemon hears of it, so
    // whoever sees the new version in a rank finds the coordinator saying so too.
    std::optional<v1::RefitReport> report;
    if (outcome.ok()) {
      report = Report(*planned, *members, *snapshot, checksummed, seconds,
                      absl::ToDoubleSeconds(end - epoch_start));
      if (metrics_ != nullptr) {
        const planner::PlanStats& stats = planned->plan->stats;
        metrics_->EpochCommitted(seconds, stats.network_bytes, stats.nvlink_bytes,
                                 stats.local_bytes, version);
        metrics_->plan_build_seconds.Set(planned->plan->plan_seconds);
      }
    }
    TellDaemons(epoch_id, version, outcome, *snapshot, retried);
    if (!outcome.ok()) {
      spdlog::warn("epoch {} version {} aborted after {:.3f} s: {}", epoch_id, version, seconds,
                   std::string(outcome.message()));
      if (metrics_ != nullptr) metrics_->EpochAborted(seconds);
      if (!retried) {
        if (lost.empty()) return outcome;
        return absl::Status(outcome.code(),
                            absl::StrCat(outcome.message(), "; lost ", DescribeReplicas(lost),
                                         ", and ", members->Without(lost).size(), " left of the ",
                                         members->needed(), " needed"));
      }
      members->Drop(lost);
      spdlog::warn("epoch {} version {}: lost {}; moving the version again to {}", epoch_id,
                   version, DescribeReplicas(lost), DescribeReplicas(members->replicas()));
      if (metrics_ != nullptr) metrics_->replicas_dropped.Increment(lost.size());
      absl::StatusOr<ClusterSnapshot> now = cluster_->Snapshot(/*destination_replicas=*/true);
      if (!now.ok()) return now.status();
      *snapshot = *std::move(now);
      NarrowDestinations(replicas_->RanksOf(members->replicas()), snapshot);
      continue;
    }
    const planner::PlanStats& stats = planned->plan->stats;
    spdlog::info(
        "epoch {} version {} committed{}: {} bytes in {:.3f} s ({:.2f} GB/s; {:.3f} s after the "
        "last publish), {} daemons, slowest {} ({:.3f} s), {} views and {} pieces checksummed, "
        "plan {}",
        epoch_id, version, replicas_.has_value() ? members->Describe() : "", stats.total_bytes,
        seconds, stats.total_bytes / std::max(seconds, 1e-9) / 1e9, report->epoch_seconds(),
        snapshot->channels.size(), report->slowest_node().empty() ? "-" : report->slowest_node(),
        report->slowest_node_seconds(), checksummed.first, checksummed.second,
        planned->wire.digest());
    if (members->LeftSomeBehind()) {
      absl::MutexLock lock(&mu_);
      catch_up_wanted_ = true;  // once the group is free (Refit)
    }
    return *std::move(report);
  }
}

EpochRunner::EpochRunner(Cluster* cluster, v1::JobSpec job, CoordinatorMetrics* metrics)
    : cluster_(cluster),
      job_(std::move(job)),
      metrics_(metrics),
      replicas_(job_.has_destination_replicas()
                    ? std::optional<DestinationReplicas>(std::in_place, job_.destination_replicas(),
                                                         job_.destination_ranks())
                    : std::nullopt) {}

absl::StatusOr<EpochMembers> EpochRunner::ChooseReplicas(int64_t version, ClusterSnapshot* snapshot,
                                                         std::optional<v1::RefitReport>* held) {
  ReplicaCensus census = replicas_->Census(RanksIn(snapshot->destination_registrations));
  HoldMisdeclared(version, *snapshot, &census);
  const std::map<int64_t, Cluster::DestinationRank> ranks = cluster_->DestinationRanks();
  const int64_t recovered = cluster_->CommittedVersion();
  MemberFacts facts;
  facts.version = version;
  facts.complete = census.complete;
  facts.enough = replicas_->CheckEnough(census);
  facts.min_replicas = replicas_->min_replicas();
  facts.published_oldest = snapshot->published_oldest;
  facts.published_newest = snapshot->published_newest;
  std::optional<v1::RefitReport> report;  // of the committed version, to answer with
  {
    absl::MutexLock lock(&mu_);
    facts.repeat = version == committed_.current();
    if (facts.repeat) {
      facts.sources_unchanged =
          committed_.CheckSourcesUnchanged(version, snapshot->source_registrations);
      facts.lacking = replicas_->Lacking(census.complete, committed_.Holders(ranks, recovered),
                                         snapshot->destination_registrations);
      if (const CommittedVersions::Committed* done = committed_.Find(version)) {
        report = done->report;
      }
      facts.report_kept = report.has_value();
    }
  }
  MemberChoice choice = ChooseMembers(facts);
  if (choice.answer_with_report) {
    *held = std::move(report);
    return EpochMembers();
  }
  if (!choice.refusal.ok()) return Refused(choice.refusal_reason, choice.refusal);
  NarrowDestinations(replicas_->RanksOf(choice.members.replicas()), snapshot);
  return std::move(choice.members);
}

void EpochRunner::HoldMisdeclared(int64_t version, const ClusterSnapshot& snapshot,
                                  ReplicaCensus* census) {
  // A vetting depends only on the registrations it read (each kind's plan, on the sources'
  // too): the last one stands while they are unchanged, so a refit of a steady group does
  // not merge and hash every replica's declarations again.
  VettedRegistrations read{{}, snapshot.source_registrations};
  for (int64_t rank : replicas_->RanksOf(census->complete)) {
    auto it = snapshot.destination_registrations.find(rank);
    if (it != snapshot.destination_registrations.end()) read.first.insert(*it);
  }
  if (!last_vetting_.has_value() || last_vetting_->first != read) {
    last_vetting_.emplace(
        std::move(read),
        VetReplicas(*replicas_, census->complete, snapshot.destination_declarations,
                    [&](int64_t replica) ABSL_NO_THREAD_SAFETY_ANALYSIS {
                      // run_mu_ is held
                      ClusterSnapshot alone = snapshot;
                      NarrowDestinations(replicas_->RanksOf({replica}), &alone);
                      return PlanEpoch(version, &alone).status();
                    }));
  }
  const ReplicaVetting& vetting = last_vetting_->second;
  census->complete = vetting.fit;
  for (const auto& [replica, why] : vetting.held)
    census->held[replica] = std::string(why.message());
  std::vector<v1::RegistrationAnswer> answers;
  {
    absl::MutexLock lock(&mu_);
    std::vector<int64_t> newly_held;
    answers = held_.Update(
        HeldReplicas::FromVetting(vetting, *replicas_, snapshot.destination_registrations),
        snapshot.destination_registrations, &newly_held);
    for (int64_t replica : newly_held) {
      spdlog::warn("version {}: {}", version, std::string(vetting.held.at(replica).message()));
    }
  }
  // Each rank's daemon hears whether it is held (with why) or no longer held.
  const transport::RankPlacement where = WhereRanksAre(snapshot);
  for (v1::RegistrationAnswer& answer : answers) {
    absl::StatusOr<int32_t> daemon = where.DaemonOf(v1::ROLE_DESTINATION, answer.rank());
    if (!daemon.ok()) continue;
    auto channel = snapshot.channels.find(*daemon);
    if (channel != snapshot.channels.end() && channel->second != nullptr) {
      v1::CoordinatorMessage message;
      *message.mutable_registration() = std::move(answer);
      channel->second->Send(message);
    }
  }
}

absl::Status EpochRunner::RefreshIfStale(ClusterSnapshot* snapshot, EpochMembers* members,
                                         bool* refreshed) {
  *refreshed = false;
  const std::map<int32_t, std::shared_ptr<DaemonChannel>> now = cluster_->Channels();
  std::vector<std::string> changed;
  for (const auto& [index, channel] : snapshot->channels) {
    auto it = now.find(index);
    if (it == now.end() || it->second != channel) changed.push_back(cluster_->NodeOf(index));
  }
  if (changed.empty()) return absl::OkStatus();
  spdlog::info("refitd on {} reconnected or left since the epoch was planned: planning it again",
               absl::StrJoin(changed, ", "));
  absl::StatusOr<ClusterSnapshot> fresh = cluster_->Snapshot(replicas_.has_value());
  if (!fresh.ok()) return fresh.status();
  if (replicas_.has_value()) {
    const std::vector<int64_t> lost = replicas_->Lacking(
        members->replicas(), snapshot->destination_registrations, fresh->destination_registrations);
    if (!members->EnoughWithout(lost)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "before the epoch began, ", DescribeReplicas(lost), " lost ranks (",
          absl::StrJoin(changed, ", "), " reconnected or left); ", members->Without(lost).size(),
          " left of the ", members->needed(), " needed"));
    }
    if (!lost.empty()) {
      spdlog::warn("dropping {}: ranks gone or registered anew before the epoch began",
                   DescribeReplicas(lost));
      if (metrics_ != nullptr) metrics_->replicas_dropped.Increment(lost.size());
      members->Drop(lost);
    }
    NarrowDestinations(replicas_->RanksOf(members->replicas()), &*fresh);
  }
  *snapshot = *std::move(fresh);
  *refreshed = true;
  return absl::OkStatus();
}

void EpochRunner::AwaitWoundDown(const ClusterSnapshot& snapshot, Deadline deadline,
                                 const Cancelled& cancelled) {
  absl::MutexLock lock(&mu_);
  auto wound_down = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return winding_down_.Over(snapshot.channels);
  };
  if (wound_down()) {
    winding_down_.Clear();
    return;
  }
  spdlog::info("waiting for {} daemons to wind down epoch {} before the next one",
               winding_down_.size(), winding_down_.epoch_id());
  // A daemon's wind-down ends within its stall limit (its data plane gives up on a dead
  // peer then); past that and a lease, the next epoch goes ahead regardless.
  const absl::Duration stall =
      absl::Milliseconds(job_.data_plane_stall_ms() > 0 ? job_.data_plane_stall_ms() : 10000);
  const absl::Duration lease = Lease();
  AwaitCancellable(mu_, absl::Condition(&wound_down), deadline.Within(stall + lease).ToTime(),
                   cancelled);
  winding_down_.Clear();  // the next epoch goes ahead: none after it waits for this one
}

std::vector<int64_t> EpochRunner::LostReplicas(const ClusterSnapshot& snapshot,
                                               const std::vector<int64_t>& replicas,
                                               Deadline deadline) {
  std::set<int32_t> daemons;
  for (const auto& [index, channel] : snapshot.channels) daemons.insert(index);
  // A daemon that died is cut within its lease (checked every quarter of it); a live one
  // heartbeats within a quarter of it.
  const absl::Duration lease = Lease();
  cluster_->AwaitHeardSince(daemons, MonotonicNow(), deadline.Within(lease * 1.5).ToTime());
  // Lost: a rank gone, or registered anew, since the epoch's snapshot, or whose process
  // stopped taking buckets.
  std::vector<int64_t> lost = replicas_->Lacking(replicas, snapshot.destination_registrations,
                                                 RegistrationsOf(cluster_->DestinationRanks()));
  std::set<int64_t> stalled;
  {
    absl::MutexLock lock(&mu_);
    if (epoch_) {
      for (int64_t rank : epoch_->stalled_destinations())
        stalled.insert(replicas_->ReplicaOf(rank));
    }
  }
  for (int64_t replica : replicas) {
    if (stalled.count(replica) && std::find(lost.begin(), lost.end(), replica) == lost.end()) {
      lost.push_back(replica);
    }
  }
  std::sort(lost.begin(), lost.end());
  return lost;
}

PauseRound::Late EpochRunner::PauseEngines(int64_t version, const ClusterSnapshot& snapshot,
                                           Deadline deadline, const Cancelled& cancelled,
                                           std::vector<int64_t>* asked) {
  std::map<int32_t, std::vector<int64_t>> by_daemon = PauseRound::RanksToAsk(snapshot);
  asked->clear();
  if (by_daemon.empty()) return {};
  const Deadline pause_deadline = deadline.Within(PauseDeadline());
  std::map<int32_t, v1::CoordinatorMessage> requests;
  {
    absl::MutexLock lock(&mu_);
    pause_.emplace(
        absl::StrCat(job_.name().empty() ? "refit" : job_.name(), "-pause-", ++pause_rounds_),
        std::move(by_daemon));
    requests = pause_->Requests(
        version, std::max<int64_t>(1, absl::ToInt64Milliseconds(pause_deadline.Left())));
    *asked = pause_->Asked();
  }
  for (const auto& [daemon, message] : requests) {
    auto channel = snapshot.channels.find(daemon);
    if (channel != snapshot.channels.end()) channel->second->Send(message);
  }
  // The daemons answer by the pause deadline; one that goes away (its stream ends, or its
  // lease) is no longer awaited (OnDaemonLost).
  absl::MutexLock lock(&mu_);
  auto answered = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return pause_->Answered(); };
  AwaitCancellable(mu_, absl::Condition(&answered),
                   deadline.Within(pause_deadline.Left() + absl::Seconds(1)).ToTime(), cancelled);
  PauseRound::Late late = pause_->LateRanks();
  pause_.reset();
  return late;
}

void EpochRunner::OnPaused(int32_t daemon, const v1::RanksPaused& paused) {
  absl::MutexLock lock(&mu_);
  if (pause_.has_value()) pause_->OnPaused(daemon, paused);
}

void EpochRunner::ResumeEngines(const ClusterSnapshot& snapshot, const std::vector<int64_t>& ranks,
                                const std::string& why) {
  const transport::RankPlacement where = WhereRanksAre(snapshot);
  std::map<int32_t, v1::CoordinatorMessage> messages;
  for (int64_t rank : ranks) {
    absl::StatusOr<int32_t> daemon = where.DaemonOf(v1::ROLE_DESTINATION, rank);
    if (!daemon.ok()) continue;
    v1::ResumeRanks* resume = messages[*daemon].mutable_resume();
    resume->add_ranks(rank);
    resume->set_reason(why);
  }
  for (const auto& [daemon, message] : messages) {
    auto channel = snapshot.channels.find(daemon);
    if (channel != snapshot.channels.end()) channel->second->Send(message);
  }
}

absl::Duration EpochRunner::Lease() const {
  return absl::Milliseconds(job_.lease_ms() > 0 ? job_.lease_ms() : 5000);
}

absl::Duration EpochRunner::PauseDeadline() const {
  return absl::Milliseconds(job_.pause_deadline_ms() > 0 ? job_.pause_deadline_ms() : 10000);
}

bool EpochRunner::CatchUp() {
  int64_t version;
  std::map<int64_t, uint64_t> holders;
  const std::map<int64_t, Cluster::DestinationRank> ranks = cluster_->DestinationRanks();
  const int64_t recovered = cluster_->CommittedVersion();
  {
    absl::MutexLock lock(&mu_);
    committed_.Recover(recovered);  // a restarted coordinator
    version = committed_.current();
    holders = committed_.Holders(ranks, recovered);
  }
  if (holders.empty()) return false;  // nothing committed, or nobody holds it
  const std::map<int64_t, uint64_t> registrations = RegistrationsOf(ranks);
  ReplicaCensus census = replicas_->Census(RanksIn(registrations));
  {
    absl::MutexLock lock(&mu_);
    held_.Exclude(*replicas_, registrations, &census);
  }
  const std::vector<int64_t> lacking = replicas_->Lacking(census.complete, holders, registrations);
  if (lacking.empty()) return false;
  const auto [oldest, newest] = cluster_->PublishedRange();
  if (oldest != version || newest != version) {
    spdlog::info(
        "{} {} version {}, which the source ranks no longer all hold (they published {} to "
        "{}): the next refit brings {}",
        DescribeReplicas(lacking), lacking.size() == 1 ? "lacks" : "lack", version, oldest, newest,
        lacking.size() == 1 ? "it" : "them");
    return false;
  }
  spdlog::info("{} {} the committed version {}: catching up", DescribeReplicas(lacking),
               lacking.size() == 1 ? "lacks" : "lack", version);
  const absl::Duration start = MonotonicNow();
  const absl::Duration timeout =
      absl::Milliseconds(job_.epoch_deadline_ms() > 0 ? job_.epoch_deadline_ms() : 60000);
  {
    absl::MutexLock lock(&mu_);
    group_version_ = version;
  }
  absl::StatusOr<v1::RefitReport> report =
      RefitHoldingGroup(version, start, Deadline::In(timeout), nullptr);
  if (!report.ok()) {
    spdlog::warn("catching up {} to version {} failed: {}", DescribeReplicas(lacking), version,
                 std::string(report.status().message()));
  }
  return true;
}

std::vector<v1::ReplicaStatus> EpochRunner::Replicas() const {
  if (!replicas_.has_value()) return {};
  const std::map<int64_t, Cluster::DestinationRank> ranks = cluster_->DestinationRanks();
  const std::map<int64_t, uint64_t> registrations = RegistrationsOf(ranks);
  ReplicaCensus census = replicas_->Census(RanksIn(registrations));
  std::map<int64_t, v1::ReplicaStatus> replicas;
  auto add = [&](int64_t replica, const char* state) -> v1::ReplicaStatus& {
    v1::ReplicaStatus& status = replicas[replica];
    status.set_replica(replica);
    status.set_state(state);
    std::set<std::string> nodes;
    for (int64_t rank : replicas_->RanksOf({replica})) {
      if (auto it = ranks.find(rank); it != ranks.end()) nodes.insert(it->second.node);
    }
    for (const std::string& node : nodes) status.add_nodes(node);
    return status;
  };
  const int64_t recovered = cluster_->CommittedVersion();
  absl::MutexLock lock(&mu_);
  const std::map<int64_t, uint64_t> holders = committed_.Holders(ranks, recovered);
  held_.Exclude(*replicas_, registrations, &census);
  for (const auto& [replica, why] : census.held) add(replica, "held").set_reason(why);
  for (int64_t replica : census.complete) {
    const bool current = replicas_->Lacking({replica}, holders, registrations).empty();
    // Current as soon as it holds the version (its catch-up may still be finishing).
    add(replica, current ? "current" : catching_up_.count(replica) ? "catching_up" : "behind");
  }
  for (const auto& [replica, missing] : census.incomplete) {
    for (int64_t rank : missing) add(replica, "incomplete").add_missing_ranks(rank);
  }
  for (int64_t replica : census.absent) {
    for (int64_t rank : replicas_->RanksOf({replica}))
      add(replica, "absent").add_missing_ranks(rank);
  }
  std::vector<v1::ReplicaStatus> listed;
  for (auto& [replica, status] : replicas) listed.push_back(std::move(status));
  return listed;
}

void EpochRunner::UpdateReplicaGauges() {
  if (metrics_ == nullptr || !replicas_.has_value()) return;
  const std::vector<v1::ReplicaStatus> replicas = Replicas();
  std::map<std::string, int64_t> by_state;
  for (const char* state : kReplicaStates) by_state[state] = 0;
  std::set<int64_t> present;
  absl::MutexLock lock(&mu_);  // one update of the per-replica series at a time
  for (const v1::ReplicaStatus& replica : replicas) {
    ++by_state[replica.state()];
    if (replica.state() == "absent") continue;
    present.insert(replica.replica());
    metrics_->replica_current.Add({{"replica", absl::StrCat(replica.replica())}})
        .Set(replica.state() == "current" ? 1 : 0);
  }
  for (const auto& [state, count] : by_state) metrics_->replicas.Add({{"state", state}}).Set(count);
  for (int64_t gone : replicas_exported_) {
    if (present.count(gone)) continue;
    metrics_->replica_current.Remove(
        &metrics_->replica_current.Add({{"replica", absl::StrCat(gone)}}));
  }
  replicas_exported_ = std::move(present);
}

absl::Status EpochRunner::Refused(const char* reason, const absl::Status& status) {
  if (metrics_ != nullptr) metrics_->RefitRefused(reason);
  return status;
}

std::optional<absl::StatusOr<v1::RefitReport>> EpochRunner::AnswerRepeat(
    int64_t version, const ClusterSnapshot& snapshot) {
  CommittedVersions::Repeat repeat;
  {
    absl::MutexLock lock(&mu_);
    repeat = committed_.AnswerRepeat(version, snapshot);
  }
  switch (repeat.kind) {
    case CommittedVersions::Repeat::kNew:
      return std::nullopt;
    case CommittedVersions::Repeat::kAnswered:
      return std::move(repeat.report);
    case CommittedVersions::Repeat::kRefused:
      return repeat.refusal;
    case CommittedVersions::Repeat::kMoveAgain:
      break;
  }
  spdlog::info("version {}: committed before, but {}; moving it again", version, repeat.why);
  return std::nullopt;
}

absl::StatusOr<EpochRunner::PlannedEpoch> EpochRunner::PlanEpoch(int64_t version,
                                                                 ClusterSnapshot* sent) {
  const ClusterSnapshot& snapshot = *sent;
  const int sources = snapshot.sources.ranks_size();
  const int destinations = snapshot.destinations.ranks_size();
  // With destination replicas, ChooseReplicas chose the destinations (complete replicas).
  const std::string incomplete =
      replicas_.has_value()
          ? absl::StrCat("the refit group is incomplete: ", sources, " of ", job_.source_ranks(),
                         " source ranks registered",
                         MissingRanks(snapshot.sources, job_.source_ranks(), "source"))
          : absl::StrCat(
                "the refit group is incomplete: ", sources, " of ", job_.source_ranks(),
                " source ranks and ", destinations, " of ", job_.destination_ranks(),
                " destination ranks registered",
                MissingRanks(snapshot.sources, job_.source_ranks(), "source"),
                MissingRanks(snapshot.destinations, job_.destination_ranks(), "destination"));
  // Every destination must be there (every rank of the replicas chosen). Missing sources
  // are planned around when the others hold their data (data-parallel replicas, replicated
  // tensors); the planner says which boxes nobody holds otherwise.
  const bool sources_missing = sources < job_.source_ranks();
  if ((!replicas_.has_value() && destinations < job_.destination_ranks()) || sources == 0 ||
      destinations == 0) {
    return absl::FailedPreconditionError(incomplete);
  }
  if (snapshot.destinations_disagree) {  // replicas are vetted before they are planned
    return absl::InvalidArgumentError("the destination replicas planned declare tensors otherwise");
  }
  if (absl::Status quantized =
          planner::SendQuantized(snapshot.destinations, &sent->sources, &sent->quantized_sources);
      !quantized.ok()) {
    return quantized;
  }
  if (absl::Status received = planner::ReceiveQuantized(&sent->sources, &sent->destinations,
                                                        &sent->quantized_on_arrival);
      !received.ok()) {
    return received;
  }
  // A rank quantizing on arrival receives those views into its daemon's memory: no piece is
  // written straight into its buffers by another daemon.
  for (const v1::QuantizedSource& q : snapshot.quantized_on_arrival) {
    sent->shared_destinations.erase(q.rank());
  }
  absl::StatusOr<planner::Layout> src = planner::CompileLayout(snapshot.sources, "source");
  if (!src.ok()) {
    if (sources_missing) return absl::FailedPreconditionError(incomplete);
    return src.status();
  }
  absl::StatusOr<planner::Layout> dst =
      planner::CompileLayout(snapshot.destinations, "destination");
  if (!dst.ok()) return dst.status();
  planner::PlanOptions options;
  if (!job_.strategy().empty()) options.strategy = job_.strategy();
  if (job_.staging_budget_bytes() > 0) options.staging_budget_bytes = job_.staging_budget_bytes();
  const v1::Topology topology = job_.has_topology() ? job_.topology() : planner::DgxH100Topology();
  absl::StatusOr<std::shared_ptr<const planner::Plan>> plan =
      plans_.GetOrBuild(*src, *dst, topology, options);
  if (!plan.ok()) {
    if (sources_missing) {
      return absl::FailedPreconditionError(absl::StrCat(
          incomplete, "; the other sources do not hold everything: ", plan.status().message()));
    }
    return plan.status();
  }
  PlannedEpoch planned{*plan, planner::PlanToProto(**plan, *src, *dst), {}};
  if (sources_missing) {
    std::set<int64_t> present;
    for (const v1::RankLayout& r : snapshot.sources.ranks()) present.insert(r.rank());
    for (int64_t r = 0; r < job_.source_ranks(); ++r) {
      if (!present.count(r)) planned.planned_around.push_back(r);
    }
    spdlog::warn(
        "version {}: source ranks {} are missing; the plan takes their data from the others",
        version, absl::StrJoin(planned.planned_around, ", "));
  }
  return planned;
}

absl::Status EpochRunner::AwaitPublishes(int64_t version, Deadline deadline,
                                         const Cancelled& cancelled) {
  auto gave_up = [&]() { return cancelled && cancelled(); };
  std::vector<int64_t> unpublished;
  do {
    unpublished =
        cluster_->AwaitPublished(version, deadline.Within(absl::Milliseconds(100)).ToTime());
  } while (!unpublished.empty() && !deadline.Passed() && !gave_up());
  if (unpublished.empty()) return absl::OkStatus();
  const std::string waiting = absl::StrCat(
      "version ", version, " was not published by source ranks ", absl::StrJoin(unpublished, ", "));
  if (gave_up()) return absl::CancelledError(absl::StrCat(waiting, " when the caller cancelled"));
  return absl::DeadlineExceededError(absl::StrCat(waiting, " before the deadline"));
}

std::pair<std::string, uint32_t> EpochRunner::StartEpoch(int64_t version, const v1::Plan& wire,
                                                         const ClusterSnapshot& snapshot) {
  const uint32_t last_epoch_run = cluster_->LastEpochNumber();
  // What lands in destination views (progress counts the same).
  int64_t bytes_total = 0;
  for (const v1::Batch& batch : wire.batches()) {
    for (const v1::Transfer& t : batch.transfers()) {
      if (t.dst().kind() == v1::ENDPOINT_DESTINATION_VIEW) bytes_total += t.bytes();
    }
  }
  std::set<int32_t> daemons;
  for (const auto& [index, channel] : snapshot.channels) daemons.insert(index);
  // Every daemon is awaited before any is asked: a fast daemon's report may arrive before
  // Launch returns.
  absl::MutexLock lock(&mu_);
  // After a coordinator restart, epochs are numbered after the daemons' last one.
  next_epoch_ = std::max(next_epoch_, last_epoch_run + 1);
  const uint32_t number = next_epoch_++;
  const std::string epoch_id =
      absl::StrCat(job_.name().empty() ? "refit" : job_.name(), "-", number);
  epoch_.emplace(epoch_id, version, std::move(daemons), bytes_total);
  ++progress_events_;
  return {epoch_id, number};
}

absl::Status EpochRunner::Decide(absl::Status launched, Deadline deadline,
                                 const Cancelled& cancelled, const ClusterSnapshot& snapshot,
                                 const v1::Plan& wire, std::pair<int64_t, int64_t>* checksummed) {
  absl::MutexLock lock(&mu_);
  const bool launched_ok = launched.ok();
  absl::Status outcome = std::move(launched);
  if (outcome.ok()) outcome = AwaitExecutionLocked(deadline, cancelled);
  if (outcome.ok()) {
    absl::StatusOr<std::pair<int64_t, int64_t>> verified = VerifyLocked(snapshot, wire);
    if (verified.ok()) *checksummed = *verified;
    outcome = verified.status();
  }
  if (outcome.ok()) outcome = epoch_->Commit();
  if (!outcome.ok() && epoch_->running()) epoch_->Abort().IgnoreError();  // running: accepted
  if (!outcome.ok() && launched_ok) {  // only daemons told to run it wind it down
    winding_down_.Start(epoch_->id(), epoch_->awaiting(), snapshot.channels);
  }
  // Decided here, atomically with the epoch no longer running: a daemon in doubt about it
  // from now on hears this outcome, and a watcher of it hears how it ended.
  committed_.Decided(epoch_->id(), outcome.ok());
  finished_ = FinishedEpoch{epoch_->version(), epoch_->Progress()};
  ++progress_events_;
  return outcome;
}

absl::Status EpochRunner::AwaitExecutionLocked(Deadline deadline, const Cancelled& cancelled) {
  if (absl::Status launched = epoch_->Launched(); !launched.ok()) return launched;
  auto settled = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return epoch_->Settled(); };
  if (!AwaitCancellable(mu_, absl::Condition(&settled), deadline.ToTime(), cancelled) &&
      cancelled && cancelled()) {
    epoch_->Fail(absl::CancelledError("the caller cancelled the refit"));
  }
  return epoch_->ExecutionOutcome([this](int32_t daemon) { return cluster_->NodeOf(daemon); });
}

absl::StatusOr<std::pair<int64_t, int64_t>> EpochRunner::VerifyLocked(
    const ClusterSnapshot& snapshot, const v1::Plan& wire) {
  if (absl::Status verifying = epoch_->Verifying(); !verifying.ok()) return verifying;
  if (job_.skip_checksums()) return std::pair<int64_t, int64_t>{0, 0};
  absl::StatusOr<int64_t> views =
      CompareViewChecksums(snapshot.sources, snapshot.destinations, epoch_->view_checksums());
  if (!views.ok()) {
    return absl::DataLossError(
        absl::StrCat("epoch ", epoch_->id(), ": ", views.status().message()));
  }
  absl::StatusOr<int64_t> pieces = ComparePieceChecksums(wire, epoch_->piece_checksums());
  if (!pieces.ok()) {
    return absl::DataLossError(
        absl::StrCat("epoch ", epoch_->id(), ": ", pieces.status().message()));
  }
  return std::pair<int64_t, int64_t>{*views, *pieces};
}

void EpochRunner::TellDaemons(const std::string& epoch_id, int64_t version,
                              const absl::Status& outcome, const ClusterSnapshot& snapshot,
                              bool retried) {
  v1::CoordinatorMessage message =
      OutcomeMessage(epoch_id, version, outcome.ok(), outcome.message());
  if (retried) message.mutable_abort()->set_retried(true);
  for (const auto& [index, channel] : snapshot.channels) channel->Send(message);
  // A daemon whose stream broke after its report said hello again in doubt: tell it too.
  SettleDaemonsInDoubt();
}

v1::RefitReport EpochRunner::Report(const PlannedEpoch& planned, const EpochMembers& members,
                                    const ClusterSnapshot& snapshot,
                                    std::pair<int64_t, int64_t> checksummed, double seconds,
                                    double epoch_seconds) {
  const planner::PlanStats& stats = planned.plan->stats;
  // A catch-up of a version committed before this coordinator started: the ranks that
  // held it already keep holding it (their daemons said so).
  std::map<int64_t, Cluster::DestinationRank> ranks;
  int64_t recovered = -1;
  if (members.catch_up()) {
    ranks = cluster_->DestinationRanks();
    recovered = cluster_->CommittedVersion();
  }
  absl::MutexLock lock(&mu_);
  v1::RefitReport report;
  report.set_epoch_id(epoch_->id());
  report.set_version(epoch_->version());
  report.set_bytes(stats.total_bytes);
  report.set_seconds(seconds);
  report.set_epoch_seconds(epoch_seconds);
  report.set_views_checksummed(checksummed.first);
  report.set_pieces_checksummed(checksummed.second);
  for (int64_t r : planned.planned_around) report.add_missing_source_ranks(r);
  for (int64_t replica : members.replicas()) report.add_replicas(replica);
  for (int64_t replica : members.dropped()) report.add_dropped_replicas(replica);
  for (int64_t replica : members.skipped()) report.add_skipped_replicas(replica);
  report.set_catch_up(members.catch_up());
  const auto [slowest_rank, slowest_rank_seconds] = epoch_->SlowestRank();
  report.set_slowest_rank(slowest_rank);
  report.set_slowest_rank_seconds(slowest_rank_seconds);
  const auto [slowest_node, slowest_node_seconds] = epoch_->SlowestDaemon();
  if (slowest_node >= 0) report.set_slowest_node(cluster_->NodeOf(slowest_node));
  report.set_slowest_node_seconds(slowest_node_seconds);
  for (auto [route, bytes] : {std::pair{v1::ROUTE_NETWORK, stats.network_bytes},
                              {v1::ROUTE_NVLINK, stats.nvlink_bytes},
                              {v1::ROUTE_LOCAL, stats.local_bytes}}) {
    v1::RouteBytes* entry = report.add_route_bytes();
    entry->set_route(route);
    entry->set_bytes(bytes);
  }
  if (members.catch_up()) {
    committed_.CaughtUp(report, ranks, recovered, snapshot.destination_registrations,
                        snapshot.source_registrations);
  } else {
    committed_.Commit(report, planned.wire.digest(), snapshot.destination_registrations,
                      snapshot.source_registrations);
  }
  return report;
}

void EpochRunner::OnDone(int32_t daemon, const v1::EpochDone& done) {
  const std::string node = cluster_->NodeOf(daemon);
  absl::MutexLock lock(&mu_);
  winding_down_.OnDone(daemon, done.epoch_id());
  if (!epoch_ || done.epoch_id() != epoch_->id()) return;  // a stale report
  epoch_->OnDone(daemon, node, done);
}

void EpochRunner::OnProgress(int32_t daemon, const v1::EpochProgress& progress) {
  absl::MutexLock lock(&mu_);
  if (!epoch_ || !epoch_->running() || progress.epoch_id() != epoch_->id()) return;
  epoch_->OnProgress(daemon, progress.bytes_done());
  ++progress_events_;
}

bool EpochRunner::Watch(const std::string& epoch_id, absl::Time deadline,
                        const std::function<bool(const v1::EpochProgress&)>& emit,
                        const std::function<bool()>& cancelled, int64_t version) {
  const Deadline end = Deadline::In(deadline - absl::Now());  // a clock step does not move it
  absl::MutexLock lock(&mu_);
  const bool running = epoch_ && epoch_->running();
  std::string watched = epoch_id;
  int64_t seen = -1;
  // With a version, an epoch that moved it and already ended counts: a watch opened late
  // hears how it ended instead of waiting for another.
  if (watched.empty() && version > 0 && !running && finished_ && finished_->version == version) {
    watched = finished_->progress.epoch_id();
  }
  while (true) {
    if (watched.empty() && epoch_ && epoch_->running() &&
        (version <= 0 || epoch_->version() == version)) {
      watched = epoch_->id();
    }
    // The running epoch, or the last one that ended (kept while the next one runs).
    std::optional<v1::EpochProgress> progress;
    if (!watched.empty() && epoch_ && epoch_->id() == watched) {
      progress = epoch_->Progress();
    } else if (!watched.empty() && finished_ && finished_->progress.epoch_id() == watched) {
      progress = finished_->progress;
    } else if (!watched.empty()) {
      return false;  // forgotten, or never was
    }
    if (progress.has_value() && seen != progress_events_) {
      seen = progress_events_;
      mu_.Unlock();
      const bool more = emit(*progress);
      mu_.Lock();
      if (!more || progress->finished()) return true;
    }
    const int64_t before = progress_events_;
    auto changed = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return progress_events_ != before; };
    mu_.AwaitWithTimeout(absl::Condition(&changed), std::min(end.Left(), absl::Milliseconds(100)));
    if (cancelled()) return true;
    if (progress_events_ == before && end.Passed()) return !watched.empty();
  }
}

void EpochRunner::OnDaemonLost(int32_t daemon, const std::string& how) {
  const std::string node = cluster_->NodeOf(daemon);
  absl::MutexLock lock(&mu_);
  // A pause round stops waiting for it: its engines cannot answer now; nor does a retry.
  if (pause_.has_value()) pause_->OnDaemonLost(daemon);
  winding_down_.OnDaemonLost(daemon);
  prepared_.erase(daemon);  // a new session prepares anew
  if (epoch_)
    epoch_->OnDaemonLost(daemon,
                         absl::UnavailableError(absl::StrCat("refitd on ", node, " ", how)));
}

void EpochRunner::SettleDaemonsInDoubt(bool superseded) {
  absl::MutexLock settling(&settle_mu_);
  for (const Cluster::InDoubtDaemon& daemon : cluster_->InDoubtDaemons()) {
    const std::string& epoch_id = daemon.epoch.epoch_id();
    std::optional<bool> decided;
    {
      absl::MutexLock lock(&mu_);
      if (epoch_ && epoch_->running() && epoch_id == epoch_->id())
        continue;  // settled when it ends
      decided = committed_.OutcomeOf(epoch_id);
    }
    InDoubtResolution resolution = ResolveInDoubt(daemon.epoch, decided, cluster_->NodeWords());
    if (resolution.outcome == InDoubtResolution::kUndecided) {
      if (!superseded) {
        spdlog::info("refitd on {} is in doubt about epoch {} (version {}): {}", daemon.node,
                     epoch_id, daemon.epoch.version(), resolution.why);
        continue;
      }
      resolution = {InDoubtResolution::kAbort,
                    absl::StrCat("a new epoch writes its buffers before its outcome was learned (",
                                 resolution.why, ")")};
    }
    const bool committed = resolution.outcome == InDoubtResolution::kCommit;
    {
      absl::MutexLock lock(&mu_);
      committed_.Decided(epoch_id, committed);  // every daemon in doubt about it hears the same
    }
    daemon.channel->Send(
        OutcomeMessage(epoch_id, daemon.epoch.version(), committed, resolution.why));
    cluster_->SettleInDoubt(daemon.index, epoch_id, committed);
    spdlog::warn("refitd on {} was in doubt about epoch {} (version {}): {} ({})", daemon.node,
                 epoch_id, daemon.epoch.version(), committed ? "committed" : "aborted",
                 resolution.why);
  }
}

v1::StatusResponse EpochRunner::Status() const {
  v1::StatusResponse status;
  for (const std::string& name : cluster_->DaemonNames()) status.add_daemons(name);
  for (const std::string& gpu : cluster_->DaemonGpus()) status.add_daemon_gpus(gpu);
  const int64_t recovered = cluster_->CommittedVersion();
  for (v1::ReplicaStatus& replica : Replicas()) *status.add_replicas() = std::move(replica);
  absl::MutexLock lock(&mu_);
  status.set_current_version(std::max(committed_.current(), recovered));
  status.set_plan_digest(committed_.plan_digest());
  for (v1::RefitReport& report : committed_.Newest(8))
    *status.add_last_epochs() = std::move(report);
  return status;
}

}  // namespace refit::daemon

#include "coordinator/pause_round.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace refit::daemon {

std::map<int32_t, std::vector<int64_t>> PauseRound::RanksToAsk(const ClusterSnapshot& snapshot) {
  const transport::RankPlacement where = WhereRanksAre(snapshot);
  std::map<int32_t, std::vector<int64_t>> by_daemon;
  for (const v1::RankLayout& rank : snapshot.destinations.ranks()) {
    absl::StatusOr<int32_t> daemon = where.DaemonOf(v1::ROLE_DESTINATION, rank.rank());
    if (rank.pauses_for_writes() && daemon.ok()) by_daemon[*daemon].push_back(rank.rank());
  }
  return by_daemon;
}

PauseRound::PauseRound(std::string id, std::map<int32_t, std::vector<int64_t>> ranks_by_daemon)
    : id_(std::move(id)), ranks_by_daemon_(std::move(ranks_by_daemon)) {
  for (const auto& [daemon, ranks] : ranks_by_daemon_) awaiting_.insert(daemon);
}

std::map<int32_t, v1::CoordinatorMessage> PauseRound::Requests(int64_t version,
                                                               int64_t deadline_ms) const {
  std::map<int32_t, v1::CoordinatorMessage> requests;
  for (const auto& [daemon, ranks] : ranks_by_daemon_) {
    v1::PauseRanks* pause = requests[daemon].mutable_pause();
    pause->set_pause_id(id_);
    pause->set_version(version);
    pause->set_deadline_ms(deadline_ms);
    for (int64_t rank : ranks) pause->add_ranks(rank);
  }
  return requests;
}

std::vector<int64_t> PauseRound::Asked() const {
  std::vector<int64_t> asked;
  for (const auto& [daemon, ranks] : ranks_by_daemon_) {
    asked.insert(asked.end(), ranks.begin(), ranks.end());
  }
  return asked;
}

void PauseRound::OnPaused(int32_t daemon, const v1::RanksPaused& paused) {
  if (paused.pause_id() != id_) return;  // a late answer to another round
  paused_.insert(paused.ranks().begin(), paused.ranks().end());
  awaiting_.erase(daemon);
}

void PauseRound::OnDaemonLost(int32_t daemon) {
  if (awaiting_.erase(daemon) > 0) gone_.insert(daemon);
}

PauseRound::Late PauseRound::LateRanks() const {
  Late late;
  for (const auto& [daemon, ranks] : ranks_by_daemon_) {
    for (int64_t rank : ranks) {
      if (paused_.count(rank)) continue;
      late.ranks.push_back(rank);
      if (gone_.count(daemon)) late.gone.push_back(rank);
    }
  }
  return late;
}

LateEngines LeaveOutLate(int64_t version, const PauseRound::Late& late,
                         const std::vector<int64_t>& asked, const std::vector<int64_t>& members,
                         const DestinationReplicas* replicas, size_t needed,
                         absl::Duration pause_deadline) {
  LateEngines decision;
  auto replica_of = [&](int64_t rank) {
    return replicas != nullptr ? replicas->ReplicaOf(rank) : 0;
  };
  std::set<int64_t> late_replicas, lost_replicas;
  for (int64_t rank : late.ranks) late_replicas.insert(replica_of(rank));
  for (int64_t rank : late.gone) lost_replicas.insert(replica_of(rank));
  for (int64_t replica : members) {
    if (!late_replicas.count(replica)) decision.left.push_back(replica);
  }
  std::vector<int64_t> slow;  // late with their daemon still there
  for (int64_t rank : late.ranks) {
    if (std::find(late.gone.begin(), late.gone.end(), rank) == late.gone.end()) {
      slow.push_back(rank);
    }
  }
  decision.what = absl::StrCat(
      late.gone.empty()
          ? ""
          : absl::StrCat("the refitd of destination ranks ", absl::StrJoin(late.gone, ", "),
                         " went away while they were asked to pause"),
      !late.gone.empty() && !slow.empty() ? "; " : "",
      slow.empty() ? ""
                   : absl::StrCat("the engines of destination ranks ", absl::StrJoin(slow, ", "),
                                  " did not pause for version ", version, " within ",
                                  absl::ToInt64Milliseconds(pause_deadline), " ms"));
  if (replicas == nullptr || decision.left.size() < needed) {
    decision.refusal = absl::DeadlineExceededError(absl::StrCat(
        decision.what,
        replicas != nullptr
            ? absl::StrCat("; ", decision.left.size(), " replicas left of the ", needed, " needed")
            : ""));
    return decision;
  }
  // A replica whose daemon went is lost (dropped); one whose engines were slow, skipped.
  for (int64_t replica : late_replicas) {
    (lost_replicas.count(replica) ? decision.dropped : decision.skipped).push_back(replica);
  }
  const std::set<int64_t> left_out_ranks =
      replicas->RanksOf({late_replicas.begin(), late_replicas.end()});
  for (int64_t rank : asked) {
    if (left_out_ranks.count(rank)) decision.resumed.push_back(rank);
  }
  return decision;
}

}  // namespace refit::daemon

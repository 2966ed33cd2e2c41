#include "coordinator/committed_versions.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace refit::daemon {
namespace {

// Whether every destination registration of `now` is one the version was committed to
// (ranks that left since do not matter; one registered since does not hold it).
bool HeldByAll(const std::map<int64_t, uint64_t>& committed_to,
               const std::map<int64_t, uint64_t>& now) {
  for (const auto& [rank, registration] : now) {
    auto it = committed_to.find(rank);
    if (it == committed_to.end() || it->second != registration) return false;
  }
  return true;
}

}  // namespace

void CommittedVersions::Recover(int64_t recovered) { current_ = std::max(current_, recovered); }

absl::Status CommittedVersions::CheckNotOlder(int64_t version) const {
  if (version >= current_) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("version ", version, " is older than the committed version ", current_));
}

const CommittedVersions::Committed* CommittedVersions::Find(int64_t version) const {
  auto it = reports_.find(version);
  return it == reports_.end() ? nullptr : &it->second;
}

std::vector<v1::RefitReport> CommittedVersions::Newest(size_t count) const {
  std::vector<v1::RefitReport> newest;
  for (auto it = reports_.rbegin(); it != reports_.rend() && newest.size() < count; ++it) {
    newest.push_back(it->second.report);
  }
  return newest;
}

std::map<int64_t, uint64_t> CommittedVersions::Holders(
    const std::map<int64_t, Cluster::DestinationRank>& ranks, int64_t recovered) const {
  const int64_t version = std::max(current_, recovered);
  if (version <= 0) return {};
  if (const Committed* done = Find(version)) return done->destinations;
  std::map<int64_t, uint64_t> holders;  // committed before this coordinator started
  for (const auto& [rank, held] : ranks) {
    if (held.held_version >= version) holders[rank] = held.registration;
  }
  return holders;
}

absl::Status CommittedVersions::CheckSourcesUnchanged(
    int64_t version, const std::map<int64_t, uint64_t>& sources) const {
  const Committed* done = Find(version);
  if (done == nullptr) return absl::OkStatus();  // a restarted coordinator cannot tell
  std::vector<std::string> anew;
  for (const auto& [rank, registration] : sources) {
    auto then = done->sources.find(rank);
    if (then == done->sources.end() || then->second != registration) {
      anew.push_back(absl::StrCat(rank));
    }
  }
  if (anew.empty()) return absl::OkStatus();
  const size_t shown = std::min<size_t>(anew.size(), 8);
  return absl::FailedPreconditionError(absl::StrCat(
      "the sources registered anew since version ", version, " was committed (source rank",
      anew.size() == 1 ? " " : "s ", absl::StrJoin(anew.begin(), anew.begin() + shown, ", "),
      anew.size() > shown ? absl::StrCat(" and ", anew.size() - shown, " more") : "",
      "): their weights may not be the ones the destinations hold as version ", version,
      "; publish a newer version"));
}

CommittedVersions::Repeat CommittedVersions::AnswerRepeat(int64_t version,
                                                          const ClusterSnapshot& snapshot) const {
  Repeat repeat;
  if (version != current_) return repeat;
  if (absl::Status same = CheckSourcesUnchanged(version, snapshot.source_registrations);
      !same.ok()) {
    repeat.kind = Repeat::kRefused;
    repeat.refusal = same;
    return repeat;
  }
  // A repeat: the same answer only for the destination ranks the version went to.
  const Committed* done = Find(version);
  if (done != nullptr && HeldByAll(done->destinations, snapshot.destination_registrations)) {
    repeat.kind = Repeat::kAnswered;
    repeat.report = done->report;
    return repeat;
  }
  repeat.why = done == nullptr
                   ? "the coordinator cannot tell which destination ranks hold it (it restarted)"
                   : "destination ranks registered since do not hold it";
  if (snapshot.published_oldest != version || snapshot.published_newest != version) {
    repeat.kind = Repeat::kRefused;
    repeat.refusal = absl::FailedPreconditionError(absl::StrCat(
        "version ", version, " is committed, but ", repeat.why,
        ", and the source ranks no longer all hold it (they published versions ",
        snapshot.published_oldest, " to ", snapshot.published_newest, "): refit a newer version"));
    return repeat;
  }
  repeat.kind = Repeat::kMoveAgain;
  return repeat;
}

void CommittedVersions::Commit(const v1::RefitReport& report, const std::string& plan_digest,
                               const std::map<int64_t, uint64_t>& destinations,
                               const std::map<int64_t, uint64_t>& sources) {
  current_ = report.version();
  plan_digest_ = plan_digest;
  reports_[report.version()] = Committed{report, destinations, sources};
  while (reports_.size() > kReportsKept) reports_.erase(reports_.begin());
}

void CommittedVersions::CaughtUp(const v1::RefitReport& report,
                                 const std::map<int64_t, Cluster::DestinationRank>& ranks,
                                 int64_t recovered, const std::map<int64_t, uint64_t>& destinations,
                                 const std::map<int64_t, uint64_t>& sources) {
  auto it = reports_.find(report.version());
  if (it == reports_.end()) {
    // Committed before this coordinator started: the ranks that held it keep holding it.
    Committed seeded{report, Holders(ranks, recovered), sources};
    it = reports_.emplace(report.version(), std::move(seeded)).first;
  }
  Committed& committed = it->second;
  for (const auto& [rank, registration] : destinations) committed.destinations[rank] = registration;
  std::set<int64_t> replicas(committed.report.replicas().begin(),
                             committed.report.replicas().end());
  replicas.insert(report.replicas().begin(), report.replicas().end());
  committed.report.clear_replicas();
  for (int64_t replica : replicas) committed.report.add_replicas(replica);
}

void CommittedVersions::Decided(const std::string& epoch_id, bool committed) {
  if (outcomes_.emplace(epoch_id, committed).second) outcome_order_.push_back(epoch_id);
  while (outcome_order_.size() > kOutcomesKept) {
    outcomes_.erase(outcome_order_.front());
    outcome_order_.pop_front();
  }
}

std::optional<bool> CommittedVersions::OutcomeOf(const std::string& epoch_id) const {
  auto it = outcomes_.find(epoch_id);
  if (it == outcomes_.end()) return std::nullopt;
  return it->second;
}

}  // namespace refit::daemon

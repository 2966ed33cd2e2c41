#include "coordinator/epoch_members.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "coordinator/destination_replicas.h"

namespace refit::daemon {

EpochMembers::EpochMembers(std::vector<int64_t> replicas, bool catch_up, size_t min_replicas)
    : replicas_(std::move(replicas)), catch_up_(catch_up), needed_(catch_up ? 1 : min_replicas) {}

std::vector<int64_t> EpochMembers::Without(const std::vector<int64_t>& gone) const {
  std::vector<int64_t> left;
  for (int64_t replica : replicas_) {
    if (std::find(gone.begin(), gone.end(), replica) == gone.end()) left.push_back(replica);
  }
  return left;
}

bool EpochMembers::EnoughWithout(const std::vector<int64_t>& gone) const {
  return Without(gone).size() >= needed_;
}

void EpochMembers::Drop(const std::vector<int64_t>& lost) {
  replicas_ = Without(lost);
  dropped_.insert(dropped_.end(), lost.begin(), lost.end());
}

void EpochMembers::Skip(const std::vector<int64_t>& slow) {
  replicas_ = Without(slow);
  skipped_.insert(skipped_.end(), slow.begin(), slow.end());
}

std::string EpochMembers::Describe() const {
  return absl::StrCat(
      catch_up_ ? " (a catch-up)" : "", " to ", DescribeReplicas(replicas_),
      dropped_.empty() ? "" : absl::StrCat(", dropped ", DescribeReplicas(dropped_)),
      skipped_.empty() ? "" : absl::StrCat(", skipped ", DescribeReplicas(skipped_)));
}

MemberChoice ChooseMembers(const MemberFacts& facts) {
  MemberChoice choice;
  auto refuse = [&](const char* reason, absl::Status status) {
    choice.refusal = std::move(status);
    choice.refusal_reason = reason;
    return choice;
  };
  std::vector<int64_t> replicas = facts.complete;
  bool catch_up = false;
  if (facts.repeat) {
    if (!facts.sources_unchanged.ok()) return refuse("stale_version", facts.sources_unchanged);
    if (facts.lacking.empty() && facts.report_kept) {
      choice.answer_with_report = true;
      return choice;
    }
    if (!facts.lacking.empty()) replicas = facts.lacking;
    catch_up = replicas.size() < facts.complete.size();
  }
  if (!catch_up && !facts.enough.ok()) return refuse("incomplete_group", facts.enough);
  if (facts.repeat &&
      (facts.published_oldest != facts.version || facts.published_newest != facts.version)) {
    return refuse(
        "stale_version",
        absl::FailedPreconditionError(absl::StrCat(
            "version ", facts.version, " is committed, but ", DescribeReplicas(replicas),
            replicas.size() == 1 ? " lacks" : " lack",
            " it, and the source ranks no longer all hold it (they published versions ",
            facts.published_oldest, " to ", facts.published_newest, "): refit a newer version")));
  }
  choice.members = EpochMembers(std::move(replicas), catch_up, facts.min_replicas);
  return choice;
}

}  // namespace refit::daemon

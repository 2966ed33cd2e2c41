// The destination replicas one refit writes, and what became of the others: those dropped
// (their ranks went away or registered anew, or their daemon went) and those skipped (their
// engines did not pause in time) between its attempts. Holds the one rule all three ways
// of losing replicas share: an attempt goes on only while `needed` are left. Pure: no
// threads, no locks, no I/O.
//
// Threading: none of its own and not thread-safe; EpochRunner keeps one per refit on the
// refitting thread.
#ifndef REFIT_COORDINATOR_EPOCH_MEMBERS_H_
#define REFIT_COORDINATOR_EPOCH_MEMBERS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace refit::daemon {

class EpochMembers {
 public:
  // A job without destination replicas: no members, one "replica" needed.
  EpochMembers() = default;
  // `replicas` written by the refit; a catch-up (some replicas lacking the committed
  // version) needs only one of them left, any other refit `min_replicas`.
  EpochMembers(std::vector<int64_t> replicas, bool catch_up, size_t min_replicas);

  const std::vector<int64_t>& replicas() const { return replicas_; }
  bool catch_up() const { return catch_up_; }
  size_t needed() const { return needed_; }
  const std::vector<int64_t>& dropped() const { return dropped_; }
  const std::vector<int64_t>& skipped() const { return skipped_; }

  // The members without `gone`, in their order.
  std::vector<int64_t> Without(const std::vector<int64_t>& gone) const;
  // Whether at least `needed` members are left without `gone`.
  bool EnoughWithout(const std::vector<int64_t>& gone) const;

  // `lost` no longer take part in this refit (said in its report as dropped).
  void Drop(const std::vector<int64_t>& lost);
  // `slow` sit this refit out (said as skipped); they catch up afterwards.
  void Skip(const std::vector<int64_t>& slow);
  // Some replicas were dropped or skipped: a catch-up is wanted once the refit is over.
  bool LeftSomeBehind() const { return !dropped_.empty() || !skipped_.empty(); }

  // For the commit's log line: " (a catch-up) to replicas 0, 2, dropped replica 1, skipped
  // replica 3" (parts that do not apply left out).
  std::string Describe() const;

 private:
  std::vector<int64_t> replicas_;
  bool catch_up_ = false;
  size_t needed_ = 1;
  std::vector<int64_t> dropped_;
  std::vector<int64_t> skipped_;
};

// What the coordinator knows when a refit of `version` begins, for ChooseMembers.
struct MemberFacts {
  int64_t version = 0;
  std::vector<int64_t> complete;  // the complete replicas the vetting kept
  absl::Status enough;            // DestinationReplicas::CheckEnough of their census
  size_t min_replicas = 1;
  bool repeat = false;             // `version` is the committed one; then the three below
  absl::Status sources_unchanged;  // CommittedVersions::CheckSourcesUnchanged
  std::vector<int64_t> lacking;    // the complete replicas that do not hold it
  bool report_kept = false;        // its report is at hand to answer with
  int64_t published_oldest = -1;   // the versions the source ranks published
  int64_t published_newest = -1;
};

// What the refit does: answer with the committed report (every complete replica holds the
// version), refuse (with the reason's metric label), or run epochs for `members`.
struct MemberChoice {
  bool answer_with_report = false;
  absl::Status refusal;
  const char* refusal_reason = "";
  EpochMembers members;
};

// A new version goes to every complete replica (refused while fewer than the minimum are
// complete). A repeat of the committed version goes to the complete replicas lacking it (a
// catch-up, which needs one; the sources must be unchanged and still hold it) and is
// answered from its report when none lacks it; with no report (a restarted coordinator),
// the version moves again to all of them.
MemberChoice ChooseMembers(const MemberFacts& facts);

}  // namespace refit::daemon

#endif  // REFIT_COORDINATOR_EPOCH_MEMBERS_H_

// What the coordinator has committed: the newest version (learned from the daemons after a
// restart), each kept version's report with the destination registrations it was committed
// to and the source registrations it came from, and how each epoch it ended was decided
// (for daemons in doubt). It answers a refit of a version committed before (a repeat) and
// says which destination ranks hold the committed version. Pure bookkeeping: no threads,
// no locks, no I/O.
//
// Threading: none of its own and not thread-safe; EpochRunner calls it under its mutex.
#ifndef REFIT_COORDINATOR_COMMITTED_VERSIONS_H_
#define REFIT_COORDINATOR_COMMITTED_VERSIONS_H_

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "coordinator/cluster.h"
#include "proto/refit.pb.h"

namespace refit::daemon {

class CommittedVersions {
 public:
  // A committed version: its report, and the registrations it went to and came from.
  struct Committed {
    v1::RefitReport report;
    std::map<int64_t, uint64_t> destinations;  // destination rank -> registration
    std::map<int64_t, uint64_t> sources;       // source rank -> registration
  };
  // Reports kept for repeats and Status, and epoch outcomes kept for daemons in doubt.
  static constexpr size_t kReportsKept = 64;
  static constexpr size_t kOutcomesKept = 256;

  // The newest committed version (-1 before any).
  int64_t current() const { return current_; }
  // The digest of the plan that committed it ("" before any).
  const std::string& plan_digest() const { return plan_digest_; }
  // A restarted coordinator learns the committed version from the daemons.
  void Recover(int64_t recovered);
  // FAILED_PRECONDITION when `version` is older than the committed version.
  absl::Status CheckNotOlder(int64_t version) const;
  // The kept record of `version`, or null.
  const Committed* Find(int64_t version) const;
  // The reports kept, newest first, at most `count`.
  std::vector<v1::RefitReport> Newest(size_t count) const;

  // The destination registrations holding the committed version (the newer of this
  // coordinator's and `recovered`, the daemons'): those its report names or, for a version
  // committed before this coordinator started, the ranks of `ranks` whose daemons said they
  // hold it.
  std::map<int64_t, uint64_t> Holders(const std::map<int64_t, Cluster::DestinationRank>& ranks,
                                      int64_t recovered) const;
  // FAILED_PRECONDITION naming the source ranks registered anew since `version` was
  // committed (a trainer restarted from a checkpoint): moving it again would give
  // destinations that hold it other bytes under the same version. OK when this coordinator
  // has no record of it (it cannot tell).
  absl::Status CheckSourcesUnchanged(int64_t version,
                                     const std::map<int64_t, uint64_t>& sources) const;

  // What a refit of `version` (without destination replicas) gets from what was committed.
  struct Repeat {
    enum Kind {
      kNew,        // not the committed version: run its epoch
      kAnswered,   // the committed report, for the ranks it went to
      kRefused,    // `refusal` (FAILED_PRECONDITION)
      kMoveAgain,  // committed, but `why` it must be moved again; the sources still hold it
    };
    Kind kind = kNew;
    v1::RefitReport report;
    absl::Status refusal;
    std::string why;
  };
  Repeat AnswerRepeat(int64_t version, const ClusterSnapshot& snapshot) const;

  // Records a newly committed version (it becomes the current one).
  void Commit(const v1::RefitReport& report, const std::string& plan_digest,
              const std::map<int64_t, uint64_t>& destinations,
              const std::map<int64_t, uint64_t>& sources);
  // Records a catch-up to the current version: its destinations hold it too and its
  // replicas join the version's report. A version committed before this coordinator
  // started gets a record first, holding the ranks of `ranks` whose daemons said they hold
  // it (`recovered`: the daemons' committed version) and `report` as its report.
  void CaughtUp(const v1::RefitReport& report,
                const std::map<int64_t, Cluster::DestinationRank>& ranks, int64_t recovered,
                const std::map<int64_t, uint64_t>& destinations,
                const std::map<int64_t, uint64_t>& sources);

  // Remembers how epoch `epoch_id` ended; the first word on an epoch stands.
  void Decided(const std::string& epoch_id, bool committed);
  // How epoch `epoch_id` ended (true: committed), if this coordinator decided it and still
  // remembers.
  std::optional<bool> OutcomeOf(const std::string& epoch_id) const;

 private:
  int64_t current_ = -1;
  std::string plan_digest_;
  std::map<int64_t, Committed> reports_;  // by version, kReportsKept newest
  std::map<std::string, bool> outcomes_;  // epoch id -> committed, kOutcomesKept latest
  std::deque<std::string> outcome_order_;
};

}  // namespace refit::daemon

#endif  // REFIT_COORDINATOR_COMMITTED_VERSIONS_H_

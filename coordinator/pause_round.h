// Engines that pause for writes (RankLayout.pauses_for_writes) are asked, before an epoch
// writes their buffers, to stop serving; their daemons answer once the engines paused. A
// PauseRound is one such ask: which daemons are asked for which ranks, who answered, who
// went away before answering, and which ranks are late once the round ends. LeaveOutLate
// decides what the refit does about late engines: with destination replicas, leave their
// replicas out of the epoch (skipped, or dropped when their daemon went) while enough are
// left; otherwise refuse the refit before its epoch. Pure: no threads, no locks, no I/O.
//
// Threading: none of its own and not thread-safe; EpochRunner calls it under its mutex.
#ifndef REFIT_COORDINATOR_PAUSE_ROUND_H_
#define REFIT_COORDINATOR_PAUSE_ROUND_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "coordinator/cluster.h"
#include "coordinator/destination_replicas.h"
#include "proto/refit.pb.h"

namespace refit::daemon {

class PauseRound {
 public:
  // By daemon, the destination ranks of `snapshot` whose engines pause for writes.
  static std::map<int32_t, std::vector<int64_t>> RanksToAsk(const ClusterSnapshot& snapshot);

  PauseRound(std::string id, std::map<int32_t, std::vector<int64_t>> ranks_by_daemon);

  const std::string& id() const { return id_; }
  // Per daemon, the message asking it to pause its ranks for `version` within
  // `deadline_ms`.
  std::map<int32_t, v1::CoordinatorMessage> Requests(int64_t version, int64_t deadline_ms) const;
  // Every rank asked, by daemon then as asked.
  std::vector<int64_t> Asked() const;

  // A daemon's answer; one for another round (late) is ignored.
  void OnPaused(int32_t daemon, const v1::RanksPaused& paused);
  // The daemon went away: it is no longer awaited, and its ranks not paused are gone.
  void OnDaemonLost(int32_t daemon);
  // Every daemon asked answered or went away.
  bool Answered() const { return awaiting_.empty(); }

  // The ranks not paused when the round ended, and those of them whose daemon went away.
  struct Late {
    std::vector<int64_t> ranks;
    std::vector<int64_t> gone;
  };
  Late LateRanks() const;

 private:
  std::string id_;
  std::map<int32_t, std::vector<int64_t>> ranks_by_daemon_;
  std::set<int32_t> awaiting_;
  std::set<int64_t> paused_;
  std::set<int32_t> gone_;
};

// What a refit does about engines late to pause.
struct LateEngines {
  // Not OK (DEADLINE_EXCEEDED): the refit ends before its epoch (no replicas, or too few
  // left).
  absl::Status refusal;
  // What happened, naming the ranks ("the engines of destination ranks 2, 3 did not pause
  // for version 4 within 500 ms"), for the log and the engines told to resume.
  std::string what;
  std::vector<int64_t> dropped;  // replicas whose daemon went away, ascending
  std::vector<int64_t> skipped;  // replicas whose engines were slow, ascending
  std::vector<int64_t> left;     // the members that stay, in their order
  std::vector<int64_t> resumed;  // ranks asked of the replicas left out: they resume
};
// `late` from the pause round of `version`, whose ranks `asked` were asked; `members` the
// replicas the epoch writes (`replicas` null without destination replicas); `needed` the
// replicas an epoch needs; `pause_deadline` how long engines had.
LateEngines LeaveOutLate(int64_t version, const PauseRound::Late& late,
                         const std::vector<int64_t>& asked, const std::vector<int64_t>& members,
                         const DestinationReplicas* replicas, size_t needed,
                         absl::Duration pause_deadline);

}  // namespace refit::daemon

#endif  // REFIT_COORDINATOR_PAUSE_ROUND_H_

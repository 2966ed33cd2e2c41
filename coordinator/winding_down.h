// The daemons still winding down the last aborted epoch: those told to run it that had not
// reported on it when it was aborted, each with the control session it ran the epoch in.
// An epoch run again at once waits for them, or their peers would count the wind-down
// against the data plane's stall limit. A daemon that reports on the epoch, goes away, or
// comes back in a new session (a restarted refitd) has nothing left to wind down. Pure: no
// threads, no locks, no I/O.
//
// Threading: none of its own and not thread-safe; EpochRunner calls it under its mutex.
#ifndef REFIT_COORDINATOR_WINDING_DOWN_H_
#define REFIT_COORDINATOR_WINDING_DOWN_H_

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "coordinator/cluster.h"

namespace refit::daemon {

class WindingDown {
 public:
  using Sessions = std::map<int32_t, std::shared_ptr<DaemonChannel>>;

  // Epoch `epoch_id` was aborted while the daemons of `awaiting` had not reported on it;
  // `sessions`: the epoch's daemons and the sessions they ran it in. Replaces what was
  // winding down before.
  void Start(const std::string& epoch_id, const std::set<int32_t>& awaiting,
             const Sessions& sessions);
  // The daemon reported on epoch `epoch_id` (a report of another epoch changes nothing).
  void OnDone(int32_t daemon, const std::string& epoch_id);
  // The daemon's session ended.
  void OnDaemonLost(int32_t daemon);
  // Whether no daemon of `sessions` (the next epoch's) still winds down in the session it
  // is in now.
  bool Over(const Sessions& sessions) const;
  // The next epoch goes ahead: nothing after it waits for this one.
  void Clear() { daemons_.clear(); }

  size_t size() const { return daemons_.size(); }
  const std::string& epoch_id() const { return epoch_id_; }

 private:
  std::string epoch_id_;
  std::map<int32_t, std::weak_ptr<DaemonChannel>> daemons_;
};

}  // namespace refit::daemon

#endif  // REFIT_COORDINATOR_WINDING_DOWN_H_

// The word a daemon that writes straight into a same-host peer's destination ranks
// (PlanExecutor::WriteStraightInto) sends that peer once per epoch when it has stopped
// writing there: right after its last batch of pieces for the peer, or when its run ends
// early (failed, interrupted). The peer does not end its own run, however that run ends,
// before it has heard from each of its writers (within a bound): once a run returns, no
// copy of that epoch still lands in the daemon's ranks, so an aborted epoch's ranks are
// marked partial only after the last write, and the next epoch cannot meet the last one's.
#ifndef REFIT_TRANSPORT_STRAIGHT_WRITE_STOPS_H_
#define REFIT_TRANSPORT_STRAIGHT_WRITE_STOPS_H_

#include <cstdint>
#include <memory>
#include <set>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "transport/ucx_worker.h"

namespace refit::transport {

class StraightWriteStops {
 public:
  explicit StraightWriteStops(UcxWorker* worker) : worker_(worker) {}
  // Settles what is still posted (at once): nothing outlives the object.
  ~StraightWriteStops();
  StraightWriteStops(const StraightWriteStops&) = delete;
  StraightWriteStops& operator=(const StraightWriteStops&) = delete;

  // Posts the receive of `writer`'s word, which comes tagged `tag`.
  absl::Status Expect(int32_t writer, uint64_t tag);
  // Sends `peer` the word, tagged `tag`; once per peer (later calls do nothing).
  absl::Status Tell(int32_t peer, UcxEndpoint* endpoint, uint64_t tag);
  bool Told(int32_t peer) const { return told_.count(peer) > 0; }

  // Waits for every word expected and sent, at most `limit`, even while the worker's
  // interrupt flag is set (an aborted epoch is exactly when it matters). UNAVAILABLE names
  // the writers not heard from: they may still be writing.
  absl::Status Settle(absl::Duration limit);

 private:
  UcxWorker* worker_;
  std::set<int32_t> told_;
  std::vector<PendingOperation> posted_;
  std::vector<int32_t> expected_;  // per receive in posted_, in order; sends are -1
};

}  // namespace refit::transport

#endif  // REFIT_TRANSPORT_STRAIGHT_WRITE_STOPS_H_

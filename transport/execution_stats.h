// What one run of a plan did on this daemon: transfers, bytes by route and by peer, relay
// buffer use, when each destination rank was complete. Filled by PlanExecutor and
// ExecuteLocally; read by refitd's metrics and reports and by the benchmarks.
#ifndef REFIT_TRANSPORT_EXECUTION_STATS_H_
#define REFIT_TRANSPORT_EXECUTION_STATS_H_

#include <cstdint>
#include <map>
#include <set>

#include "proto/refit.pb.h"

namespace refit::transport {

// XXH3-64 of the boxes transfers moved (HashBox), taken while they were copied, by transfer
// sequence: at the transfer's source view as it was read (packed or copied), and at its
// destination view as it was written (for a bucketed rank: as it was handed to the sink).
// Host memory only: ends in GPU memory are not hashed.
struct PieceHashes {
  std::map<int64_t, uint64_t> at_source;
  std::map<int64_t, uint64_t> at_destination;
  // Transfers into this daemon's destination views that a same-host daemon wrote straight
  // into their memory (PlanExecutor::WriteStraightInto): their destination ends are that
  // daemon's to hash (in its at_destination), not this one's.
  std::set<int64_t> written_by_peers;
};

struct ExecutionStats {
  int64_t transfers = 0;
  int64_t bytes = 0;
  int64_t runs = 0;             // contiguous memcpy runs issued
  int64_t delivered_bytes = 0;  // written into destination views by this daemon
  int64_t bytes_by_route[v1::Route_ARRAYSIZE] = {};
  // Bytes this daemon sent to / received from each other daemon (by index).
  std::map<int32_t, int64_t> bytes_sent_to;
  std::map<int32_t, int64_t> bytes_received_from;
  // Of those, the bytes handed over through shared memory (same-host daemons) instead of
  // UCX messages (or written straight into a peer's destination rank), sent plus received.
  int64_t bytes_via_shared_memory = 0;
  // Seconds from the start of the run until each destination rank this daemon writes
  // (served here, or a same-host peer's written straight) had its last byte of the plan
  // from this daemon written (PlanExecutor only): a rank's finish is the latest over daemons.
  std::map<int64_t, double> destination_finish_seconds;
  // Relay buffers of this daemon (PlanExecutor only): the most bytes held at once, how
  // many are still held after the last batch run (0 once the run ends: each is freed after
  // its last read), and the bytes of the blocks they were laid out in (one per device).
  int64_t relay_buffer_peak_bytes = 0;
  int64_t relay_buffers_left = 0;
  int64_t relay_buffer_block_bytes = 0;
  // With PlanExecutor::HashPieces: the hashes taken on the way.
  PieceHashes piece_hashes;
};

}  // namespace refit::transport

#endif  // REFIT_TRANSPORT_EXECUTION_STATS_H_

// The `local` backend: runs a plan whose endpoints all live in one refitd's BufferMap,
// copying straight between the mapped buffers (no staging copy), batch by batch and in
// list order inside a batch. Scratch endpoints (gather_broadcast) get dense full-tensor
// buffers for the length of the run. (PlanExecutor with every rank on one daemon.)
#ifndef REFIT_TRANSPORT_LOCAL_EXECUTOR_H_
#define REFIT_TRANSPORT_LOCAL_EXECUTOR_H_

#include <cstdint>
#include <map>

#include "absl/status/statusor.h"
#include "proto/refit.pb.h"
#include "transport/buffer_map.h"

namespace refit::transport {

struct ExecutionStats {
  int64_t transfers = 0;
  int64_t bytes = 0;
  int64_t runs = 0;             // contiguous memcpy runs issued
  int64_t delivered_bytes = 0;  // written into this daemon's destination views
  int64_t bytes_by_route[v1::Route_ARRAYSIZE] = {};
  // Bytes this daemon sent to / received from each other daemon (by index).
  std::map<int32_t, int64_t> bytes_sent_to;
  std::map<int32_t, int64_t> bytes_received_from;
  // Seconds from the start of the run until each destination rank served here had its
  // last byte of the plan written (PlanExecutor only).
  std::map<int64_t, double> destination_finish_seconds;
  // Relay buffers of this daemon (PlanExecutor only): the most bytes held at once, how
  // many are still held after the last batch run (0 once the run ends: each is freed after
  // its last read), and the bytes of the blocks they were laid out in (one per device).
  int64_t relay_buffer_peak_bytes = 0;
  int64_t relay_buffers_left = 0;
  int64_t relay_buffer_block_bytes = 0;
  // Pieces handed to the destination sink (bucketed ranks), by transfer sequence: the
  // XXH3-64 of each box as handed over (host memory only; PlanExecutor only).
  std::map<int64_t, uint64_t> bucketed_piece_hashes;
};

// Executes `plan`. Fails, naming the transfer, when an endpoint is not registered here or
// a box leaves its view; transfers before the failing one have run.
absl::StatusOr<ExecutionStats> ExecuteLocally(const v1::Plan& plan, const BufferMap& buffers);

}  // namespace refit::transport

#endif  // REFIT_TRANSPORT_LOCAL_EXECUTOR_H_

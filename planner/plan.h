// The planner's output in memory: pieces (global boxes of a tensor), transfers that move
// a piece between two endpoints, grouped into batches, with the plan's statistics.
// Compact on purpose: DeepSeek-V3 at 512 ranks has about a million transfers.
#ifndef REFIT_PLANNER_PLAN_H_
#define REFIT_PLANNER_PLAN_H_

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "planner/box.h"
#include "planner/layout.h"
#include "proto/refit.pb.h"

namespace refit::planner {

enum class EndpointKind : uint8_t {
  kSourceView,       // a view of the source layout
  kDestinationView,  // a view of the destination layout (read when forwarding)
  kSourceScratch,    // dense full-tensor scratch on a source rank (gather_broadcast)
  kDestinationScratch,
  // A piece-sized dense buffer on a source rank's GPU that receives a piece over its NIC
  // and forwards it over NVLink (reshard relays through GPUs that are not destinations);
  // index is the piece whose box it holds. Freed once its last reader has run.
  kRelayBuffer,
};

// Batch indices fit in 24 bits, as rank indices do (kMaxRanksPerSide), so that a transfer
// takes 24 bytes; plans have hundreds of batches, and BuildPlan refuses one with more.
inline constexpr int32_t kMaxBatches = (1 << 23) - 1;

struct Endpoint {
  EndpointKind kind : 8;
  int32_t rank_index : 24;  // into the source or destination layout's ranks, by kind
                            // (at most kMaxRanksPerSide: an endpoint takes 8 bytes)
  // View index into Layout::views, tensor index for scratch, piece index for a relay buffer.
  int32_t index;

  constexpr Endpoint(EndpointKind kind = EndpointKind::kSourceView, int32_t rank_index = 0,
                     int32_t index = 0)
      : kind(kind), rank_index(rank_index), index(index) {}

  bool IsSourceSide() const {
    return kind == EndpointKind::kSourceView || kind == EndpointKind::kSourceScratch ||
           kind == EndpointKind::kRelayBuffer;
  }
  bool operator==(const Endpoint& o) const {
    return kind == o.kind && rank_index == o.rank_index && index == o.index;
  }
};

struct Piece {
  int32_t tensor = 0;  // into the destination layout's tensors
  Box box;
  int64_t bytes = 0;
};

// A v1::Route in one byte (a bit-field of the proto's enum cannot hold its sentinels).
class PackedRoute {
 public:
  constexpr PackedRoute(v1::Route route = v1::ROUTE_UNSPECIFIED)  // NOLINT: converts
      : value_(static_cast<uint8_t>(route)) {}
  constexpr operator v1::Route() const { return static_cast<v1::Route>(value_); }  // NOLINT

 private:
  uint8_t value_;
};

struct Transfer {
  Endpoint src;
  Endpoint dst;
  int32_t piece = 0;  // into Plan::pieces
  int32_t batch : 24;
  PackedRoute route;
  // Its bytes are its piece's (Plan::BytesOf): not kept here, since a large plan has tens
  // of millions of transfers.

  Transfer() : batch(0) {}
};
static_assert(sizeof(Endpoint) == 8 && sizeof(Transfer) == 24,
              "a transfer is 24 bytes: a large plan holds tens of millions");
static_assert(std::has_unique_object_representations_v<Transfer>,
              "a transfer has no padding: the digest hashes transfers as they are in memory");

// A plan the planner priced while choosing: "reshard_relays", "reshard_direct" or
// "gather_broadcast", and what the cost model predicts for it. With `at_least` the plan
// was routed but not priced: its busiest link alone takes predicted_seconds, already
// slower than the plan chosen.
struct PlanCandidate {
  std::string name;
  double predicted_seconds = 0;
  bool at_least = false;
};

struct PlanStats {
  int64_t total_bytes = 0;
  int64_t network_bytes = 0;
  int64_t nvlink_bytes = 0;
  int64_t local_bytes = 0;
  int64_t lower_bound_network_bytes = 0;
  int64_t max_link_bytes = 0;
  double mean_link_bytes = 0;
  double predicted_seconds = 0;
  // Of predicted_seconds, what the batches' latencies take (a batch's start and one
  // message per peer of its busiest rank); the rest is bytes over the busiest links.
  double predicted_latency_seconds = 0;
  double lower_bound_seconds = 0;
  // Bytes a destination domain received from another one (relays), not from a source.
  int64_t relayed_bytes = 0;
  // Bytes received over the network into relay buffers (GPUs that are not destinations of
  // the piece), and the most relay-buffer bytes one GPU holds at once (a buffer lives from
  // the batch that fills it to the last batch that reads it).
  int64_t relay_buffer_bytes = 0;
  int64_t relay_buffer_peak_bytes = 0;
  // Where the plan relays: the predicted seconds of the plan without relays, where the
  // planner made it to compare (0 where it did not: the relayed plan was already faster
  // than any direct plan can be), and what no plan without relays can beat.
  double direct_predicted_seconds = 0;
  double direct_lower_bound_seconds = 0;
  // Every plan priced to choose this one, in the order planned (the chosen one included),
  // and the name of the one chosen.
  std::vector<PlanCandidate> candidates;
  std::string chosen;
};

struct Plan {
  std::string strategy;
  std::vector<Piece> pieces;
  // Sorted by batch; inside a batch in issue order (gather_broadcast chains depend on it).
  std::vector<Transfer> transfers;
  int32_t num_batches = 0;
  // True when transfers inside a batch must run in list order (gather_broadcast chains);
  // otherwise only batch order matters.
  bool ordered_batches = false;
  PlanStats stats;
  std::string digest;  // 32 hex digits
  double plan_seconds = 0;

  int64_t BytesOf(const Transfer& transfer) const { return pieces[transfer.piece].bytes; }
};

}  // namespace refit::planner

#endif  // REFIT_PLANNER_PLAN_H_

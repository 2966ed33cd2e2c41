// Knobs of a planning run. Defaults suit a DGX H100 cluster.
#ifndef REFIT_PLANNER_OPTIONS_H_
#define REFIT_PLANNER_OPTIONS_H_

#include <cstdint>
#include <string>

namespace refit::planner {

inline constexpr char kStrategyReshard[] = "reshard";
inline constexpr char kStrategyGatherBroadcast[] = "gather_broadcast";
// Plans both and keeps the one the cost model says is faster.
inline constexpr char kStrategyAuto[] = "auto";

struct PlanOptions {
  std::string strategy = kStrategyReshard;
  // Bytes one rank may send or receive in one batch (its staging area); pieces larger
  // than this are cut into several.
  int64_t staging_budget_bytes = int64_t{1} << 30;
  // Pieces above this size held by several replicas are split across them.
  int64_t split_threshold_bytes = int64_t{32} << 20;
  // Cross the network once per NVLink domain and forward inside it.
  bool hierarchical = true;
  // With hierarchical: a domain may receive a piece from a domain that received it before
  // (relays), so the sources' NICs send it once rather than once per domain.
  bool relays = true;
  // With hierarchical: a piece bound for a domain may cross the network into a relay
  // buffer on a source GPU of that domain (whose NIC-in is otherwise idle) and reach its
  // destinations over NVLink, when that GPU has received less than the destinations have.
  bool relay_buffers = true;
};

}  // namespace refit::planner

#endif  // REFIT_PLANNER_OPTIONS_H_

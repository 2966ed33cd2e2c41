// What no plan can beat on a given topology, whatever the strategy:
//  - network bytes: summed over destination NVLink domains, the unique destination bytes
//    (by tensor and global coordinate) that no source inside that domain holds;
//  - seconds: the most loaded link's unavoidable bytes over its bandwidth, where a domain's
//    NIC-in must carry its network bytes, a source domain's NIC-out the bytes only it holds
//    that other domains need (once: they may forward them among themselves), and a
//    destination GPU's ingress (NIC + NVLink) the bytes of its views that its own GPU does
//    not hold (each spread evenly over the domain's GPUs).
// Each term holds for any plan, relays through other domains or GPUs included: bytes a
// domain needs and does not hold enter it at least once, bytes only one domain holds leave
// it at least once, and a GPU receives what it writes and does not hold.
#ifndef REFIT_PLANNER_LOWER_BOUND_H_
#define REFIT_PLANNER_LOWER_BOUND_H_

#include <cstdint>

#include "planner/problem.h"

namespace refit::planner {

struct LowerBound {
  int64_t network_bytes = 0;
  double seconds = 0;
  // The destination domains' NIC-in term alone: how long the busiest destination domain's
  // NICs need for what must enter it (any plan takes at least this).
  double nic_in_seconds = 0;
  // What no plan without relays can beat: there every byte crosses the network out of a
  // GPU that holds it, once for every domain that needs it and holds none of it. Counted
  // per source domain, per source GPU (what only it holds) and per set of source GPUs
  // (what only the set holds, at least an even share on its busiest); 0 where it was not
  // worked out.
  double direct_seconds = 0;
};

LowerBound ComputeLowerBound(const PlanningProblem& problem);

}  // namespace refit::planner

#endif  // REFIT_PLANNER_LOWER_BOUND_H_

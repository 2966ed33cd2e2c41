// Executes a plan on host memory and checks every destination byte. Each source element
// gets a value determined by (tensor, global index); destination buffers start poisoned;
// transfers run as plain strided copies; afterwards every destination element must hold
// its value and every buffer byte outside the views must still be poison.
#ifndef REFIT_PLANNER_CHECK_BYTE_CHECKER_H_
#define REFIT_PLANNER_CHECK_BYTE_CHECKER_H_

#include <cstdint>

#include "absl/status/status.h"
#include "planner/layout.h"
#include "planner/plan.h"

namespace refit::check {

struct ByteCheckStats {
  int64_t allocated_bytes = 0;
  int64_t checked_bytes = 0;
};

// OK; FAILED_PRECONDITION naming the tensor, rank and element that is wrong; or
// RESOURCE_EXHAUSTED when the layouts need more than `max_bytes` of host memory.
absl::Status CheckBytes(const planner::Layout& sources, const planner::Layout& destinations,
                        const planner::Plan& plan, int64_t max_bytes,
                        ByteCheckStats* stats = nullptr);

}  // namespace refit::check

#endif  // REFIT_PLANNER_CHECK_BYTE_CHECKER_H_

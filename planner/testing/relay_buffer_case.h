// A refit that needs relay buffers, shared by the planner's and the data plane's tests:
// one NVLink domain holds four trainer GPUs and one inference GPU, and the inference GPU
// needs a tensor that only trainers in another domain hold. Received on its own NIC it
// takes five times as long as spread over the five NICs of its domain, through relay
// buffers on the four trainer GPUs (whose NICs receive nothing else) and NVLink.
#ifndef REFIT_PLANNER_TESTING_RELAY_BUFFER_CASE_H_
#define REFIT_PLANNER_TESTING_RELAY_BUFFER_CASE_H_

#include "planner/testing/layout_builder.h"
#include "proto/refit.pb.h"

namespace refit::testing {

struct RelayBufferCase {
  LayoutBuilder sources, destinations;
  v1::Topology topology;  // hosts "near" and "inference" share a domain; "far" is its own
  // A staging budget that cuts the far tensor into 16 pieces.
  int64_t staging_budget_bytes = 256 << 10;
};

RelayBufferCase MakeRelayBufferCase();

}  // namespace refit::testing

#endif  // REFIT_PLANNER_TESTING_RELAY_BUFFER_CASE_H_

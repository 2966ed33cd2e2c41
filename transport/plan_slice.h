// One daemon's part of a plan: batch by batch, the transfers whose source or destination
// rank that daemon serves (the batch structure is kept, so batch numbers agree everywhere).
#ifndef REFIT_TRANSPORT_PLAN_SLICE_H_
#define REFIT_TRANSPORT_PLAN_SLICE_H_

#include <cstdint>

#include "proto/refit.pb.h"
#include "transport/rank_placement.h"

namespace refit::transport {

v1::Plan SlicePlan(const v1::Plan& plan, const RankPlacement& placement, int32_t daemon);

}  // namespace refit::transport

#endif  // REFIT_TRANSPORT_PLAN_SLICE_H_

// The transfers of a plan in batch order, which the cost model and the executors walk.
#ifndef REFIT_PLANNER_BATCH_ORDER_H_
#define REFIT_PLANNER_BATCH_ORDER_H_

#include "planner/plan.h"

namespace refit::planner {

// Orders the transfers by batch, keeping their order within each batch. A plan already in
// batch order is left as it is.
void SortByBatch(Plan* plan);

}  // namespace refit::planner

#endif  // REFIT_PLANNER_BATCH_ORDER_H_

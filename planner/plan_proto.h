// The wire and file form of a plan (refit.v1.Plan): endpoints by rank id and view position,
// tensors by name, transfers grouped into batches. The coordinator ships slices of it.
#ifndef REFIT_PLANNER_PLAN_PROTO_H_
#define REFIT_PLANNER_PLAN_PROTO_H_

#include "planner/layout.h"
#include "planner/plan.h"
#include "proto/refit.pb.h"

namespace refit::planner {

v1::Plan PlanToProto(const Plan& plan, const Layout& sources, const Layout& destinations);

}  // namespace refit::planner

#endif  // REFIT_PLANNER_PLAN_PROTO_H_

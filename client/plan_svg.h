// `refitctl plan --svg`: a picture of a plan. On the left the transfer matrix (source
// ranks down, destination ranks across, each cell coloured by the bytes that pair moves,
// NVLink-domain boundaries drawn as lines); on the right the load of every GPU's busiest
// link in seconds at the topology's bandwidths, against the plan's lower bound. A user sees
// at a glance whether traffic is spread evenly and how far the busiest link is from what
// no plan can beat.
#ifndef REFIT_CLIENT_PLAN_SVG_H_
#define REFIT_CLIENT_PLAN_SVG_H_

#include <string>

#include "client/plan_report.h"
#include "proto/refit.pb.h"

namespace refit::client {

std::string PlanSvg(const PlanSummary& summary, const v1::Topology& topology);

}  // namespace refit::client

#endif  // REFIT_CLIENT_PLAN_SVG_H_

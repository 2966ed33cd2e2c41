// Fuzz target: two layouts as they reach the coordinator (a LayoutsResponse in binary
// proto form: sources and destinations), through validation, planning with both
// strategies, the plan's wire form and a daemon's slice of it. Any input must end in an
// error or a plan; never a crash, a hang or a sanitizer report.
#include <cstddef>
#include <cstdint>

#include "google/protobuf/stubs/logging.h"
#include "planner/layout.h"
#include "planner/plan_proto.h"
#include "planner/planner.h"
#include "planner/topology.h"
#include "proto/refit.pb.h"
#include "transport/plan_slice.h"

// Invalid UTF-8 in string fields is an ordinary parse failure here, not worth a log line.
static const bool kQuietProtobuf = [] {
  google::protobuf::SetLogHandler(nullptr);
  return true;
}();

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  refit::v1::LayoutsResponse layouts;
  if (!layouts.ParseFromArray(data, static_cast<int>(size))) return 0;
  auto src = refit::planner::CompileLayout(layouts.sources(), "source");
  auto dst = refit::planner::CompileLayout(layouts.destinations(), "destination");
  if (!src.ok() || !dst.ok()) return 0;
  for (const char* strategy :
       {refit::planner::kStrategyReshard, refit::planner::kStrategyGatherBroadcast}) {
    refit::planner::PlanOptions options;
    options.strategy = strategy;
    options.staging_budget_bytes = 4096;
    auto plan = refit::planner::BuildPlan(*src, *dst, refit::planner::DgxH100Topology(), options);
    if (!plan.ok()) continue;
    const refit::v1::Plan wire = refit::planner::PlanToProto(**plan, *src, *dst);
    refit::transport::RankPlacement placement;
    placement.SetDefault(0);
    refit::transport::SlicePlan(wire, placement, 0);
  }
  return 0;
}

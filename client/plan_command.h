// `refitctl plan`: plans a refit offline (no daemons) from layout files, a model and
// parallel settings, or a reference refit, then prints a report and optionally verifies.
#ifndef REFIT_CLIENT_PLAN_COMMAND_H_
#define REFIT_CLIENT_PLAN_COMMAND_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "planner/layout.h"
#include "planner/plan.h"
#include "proto/refit.pb.h"

namespace refit::client {

inline constexpr int kExitOk = 0;
inline constexpr int kExitVerifyFailed = 1;
inline constexpr int kExitInvalidInput = 2;
// A live command's call failed: the coordinator was unreachable, refused it, or the refit
// failed (a refit whose checks found wrong bytes, DATA_LOSS, exits kExitVerifyFailed).
inline constexpr int kExitRequestFailed = 3;

// Runs the command on `args` (after "plan"); returns the process exit code.
int RunPlanCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

extern const char kPlanUsage[];

struct PlanReportOptions {
  std::string verify;                           // "bytes", "coverage", or empty for no check
  int64_t verify_max_bytes = int64_t{4} << 30;  // the byte check's memory, at most
  bool json = false;
  std::string svg_path;                    // where to draw the plan; empty: nowhere
  const v1::Topology* topology = nullptr;  // for the drawing (null: DGX H100)
  // Quantized destinations: the same refit in the sources' precision, to compare.
  const planner::Plan* unquantized = nullptr;
  int64_t tensors_quantized_on_arrival = 0;  // PlanSummary's
  int64_t tensors_dequantized = 0;           // PlanSummary's
};

// What `refitctl plan` does once it has a plan: checks it as `options.verify` says,
// draws it, prints its report to `out` and a failed check to `err`. Returns the exit
// status: kExitVerifyFailed when the plan is wrong.
int VerifyAndReport(const planner::Plan& plan, const planner::Layout& sources,
                    const planner::Layout& destinations, const PlanReportOptions& options,
                    std::ostream& out, std::ostream& err);

}  // namespace refit::client

#endif  // REFIT_CLIENT_PLAN_COMMAND_H_

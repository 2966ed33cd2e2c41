// How `refitctl plan` shows a plan: one JSON object for scripts, a table for people.
#ifndef REFIT_CLIENT_PLAN_REPORT_H_
#define REFIT_CLIENT_PLAN_REPORT_H_

#include <optional>
#include <string>

#include "planner/layout.h"
#include "planner/plan.h"

namespace refit::client {

struct PlanSummary {
  const planner::Plan* plan = nullptr;
  const planner::Layout* sources = nullptr;
  const planner::Layout* destinations = nullptr;
  std::optional<bool> verified;  // absent when not asked
  std::string verify_mode;       // "bytes" or "coverage"
  // Quantized destinations: the same refit in the sources' precision (else null).
  const planner::Plan* unquantized = nullptr;
  // Destination tensors quantized on arrival (their blocks cut between source ranks: they
  // cross in the sources' dtype).
  int64_t tensors_quantized_on_arrival = 0;
  // Destination tensors dequantized on arrival (codes and scales cross).
  int64_t tensors_dequantized = 0;
};

std::string PlanReportJson(const PlanSummary& summary);
std::string PlanReportTable(const PlanSummary& summary);

// "10.8 TB", "512.0 MB", "12 B".
std::string HumanBytes(double bytes);

}  // namespace refit::client

#endif  // REFIT_CLIENT_PLAN_REPORT_H_

#include "client/plan_report.h"

#include <cinttypes>
#include <cstdio>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/json_object.h"
#include "planner/options.h"

namespace refit::client {
namespace {

double Ratio(double a, double b) { return b > 0 ? a / b : 0; }

// Which priced plan won, and over what: "reshard_relays 1.232 s, over reshard_direct
// 18.842 s and gather_broadcast 1.382 s".
std::string Chosen(const planner::Plan& plan) {
  const std::string& chosen = plan.stats.chosen;
  std::vector<std::string> others;
  double chosen_seconds = plan.stats.predicted_seconds;
  for (const planner::PlanCandidate& candidate : plan.stats.candidates) {
    if (candidate.name == chosen) {
      chosen_seconds = candidate.predicted_seconds;
    } else {
      others.push_back(absl::StrFormat("%s %s%.3f s", candidate.name,
                                       candidate.at_least ? "at least " : "",
                                       candidate.predicted_seconds));
    }
  }
  std::string out = absl::StrFormat("%s %.3f s", chosen, chosen_seconds);
  if (others.empty()) return out + " (the only plan priced)";
  return absl::StrCat(out, ", over ", absl::StrJoin(others, " and "));
}

}  // namespace

std::string HumanBytes(double bytes) {
  static const char* kUnits[] = {"B", "kB", "MB", "GB", "TB", "PB"};
  int unit = 0;
  while (bytes >= 1000 && unit < 5) {
    bytes /= 1000;
    ++unit;
  }
  return unit == 0 ? absl::StrFormat("%.0f B", bytes)
                   : absl::StrFormat("%.1f %s", bytes, kUnits[unit]);
}

std::string PlanReportJson(const PlanSummary& summary) {
  const planner::Plan& plan = *summary.plan;
  const planner::PlanStats& s = plan.stats;
  JsonObject json;
  json.Text("strategy", plan.strategy);
  json.Int("source_ranks", summary.sources->ranks.size());
  json.Int("destination_ranks", summary.destinations->ranks.size());
  json.Int("tensors", summary.destinations->tensors.size());
  json.Int("transfers", plan.transfers.size());
  json.Int("batches", plan.num_batches);
  json.Int("total_bytes", s.total_bytes);
  json.Int("network_bytes", s.network_bytes);
  json.Int("nvlink_bytes", s.nvlink_bytes);
  json.Int("local_bytes", s.local_bytes);
  json.Int("lower_bound_network_bytes", s.lower_bound_network_bytes);
  json.Int("max_link_bytes", s.max_link_bytes);
  json.Real("mean_link_bytes", s.mean_link_bytes);
  json.Real("predicted_seconds", s.predicted_seconds);
  json.Real("predicted_latency_seconds", s.predicted_latency_seconds);
  json.Real("lower_bound_seconds", s.lower_bound_seconds);
  json.Int("relayed_bytes", s.relayed_bytes);
  json.Int("relay_buffer_bytes", s.relay_buffer_bytes);
  json.Int("relay_buffer_peak_bytes", s.relay_buffer_peak_bytes);
  json.Real("direct_predicted_seconds", s.direct_predicted_seconds);
  json.Real("direct_lower_bound_seconds", s.direct_lower_bound_seconds);
  for (const planner::PlanCandidate& candidate : s.candidates) {
    json.Real(absl::StrCat("candidate_", candidate.name, "_seconds").c_str(),
              candidate.predicted_seconds);
    if (candidate.at_least) {
      json.Bool(absl::StrCat("candidate_", candidate.name, "_at_least").c_str(), true);
    }
  }
  if (summary.unquantized != nullptr) {
    const planner::PlanStats& plain = summary.unquantized->stats;
    json.Int("unquantized_total_bytes", plain.total_bytes);
    json.Int("unquantized_network_bytes", plain.network_bytes);
    json.Int("quantization_saved_network_bytes", plain.network_bytes - s.network_bytes);
    json.Real("unquantized_predicted_seconds", plain.predicted_seconds);
    json.Real("unquantized_lower_bound_seconds", plain.lower_bound_seconds);
    json.Int("tensors_quantized_on_arrival", summary.tensors_quantized_on_arrival);
    json.Int("tensors_dequantized", summary.tensors_dequantized);
  }
  json.Real("plan_seconds", plan.plan_seconds);
  json.Text("digest", plan.digest);
  if (summary.verified.has_value()) {
    json.Bool("verified", *summary.verified);
    json.Text("verify", summary.verify_mode);
  }
  return json.Done();
}

namespace {

// What quantizing the destinations saves: the plan against the same refit in the sources'
// precision.
std::string Quantization(const PlanSummary& summary) {
  if (summary.unquantized == nullptr) return "none (the destinations hold the sources' dtypes)";
  const planner::PlanStats& s = summary.plan->stats;
  const planner::PlanStats& plain = summary.unquantized->stats;
  std::string text = absl::StrFormat(
      "network %s vs %s in the sources' precision (%.3fx, %s saved); predicted %.3f s vs %.3f s",
      HumanBytes(s.network_bytes), HumanBytes(plain.network_bytes),
      Ratio(s.network_bytes, plain.network_bytes),
      HumanBytes(plain.network_bytes - s.network_bytes), s.predicted_seconds,
      plain.predicted_seconds);
  if (summary.tensors_dequantized > 0) {
    absl::StrAppend(&text, "; ", summary.tensors_dequantized,
                    " tensors cross as the sources' FP8 codes and scales, dequantized on arrival");
  }
  if (summary.tensors_quantized_on_arrival > 0) {
    absl::StrAppend(&text, "; ", summary.tensors_quantized_on_arrival,
                    " tensors cross in the sources' precision, quantized on arrival (source "
                    "shards cut their blocks)");
  }
  return text;
}

}  // namespace

std::string PlanReportTable(const PlanSummary& summary) {
  const planner::Plan& plan = *summary.plan;
  const planner::PlanStats& s = plan.stats;
  std::vector<std::pair<std::string, std::string>> rows = {
      {"strategy", plan.strategy},
      {"ranks", absl::StrCat(summary.sources->ranks.size(), " sources -> ",
                             summary.destinations->ranks.size(), " destinations, ",
                             summary.destinations->tensors.size(), " tensors")},
      {"transfers", absl::StrCat(plan.transfers.size(), " in ", plan.num_batches, " batches")},
      {"bytes moved",
       absl::StrCat(HumanBytes(s.total_bytes), " (network ", HumanBytes(s.network_bytes),
                    ", nvlink ", HumanBytes(s.nvlink_bytes), ", local ", HumanBytes(s.local_bytes),
                    ")")},
      {"network bytes", absl::StrFormat("%s vs lower bound %s (%.3fx)", HumanBytes(s.network_bytes),
                                        HumanBytes(s.lower_bound_network_bytes),
                                        Ratio(s.network_bytes, s.lower_bound_network_bytes))},
      {"link load",
       absl::StrFormat("max %s, mean %s (%.2fx)", HumanBytes(s.max_link_bytes),
                       HumanBytes(s.mean_link_bytes), Ratio(s.max_link_bytes, s.mean_link_bytes))},
      {"predicted time",
       absl::StrFormat("%.3f s vs lower bound %.3f s (%.3fx), cost model; %.3f s of it batch "
                       "and message latency",
                       s.predicted_seconds, s.lower_bound_seconds,
                       Ratio(s.predicted_seconds, s.lower_bound_seconds),
                       s.predicted_latency_seconds)},
      {"relays", s.relayed_bytes == 0
                     ? std::string("none (every destination domain receives from the sources)")
                 : s.direct_predicted_seconds > 0
                     ? absl::StrFormat("%s forwarded domain to domain; without relays %.3f s",
                                       HumanBytes(s.relayed_bytes), s.direct_predicted_seconds)
                     : absl::StrFormat("%s forwarded domain to domain; without relays at least "
                                       "%.3f s (not priced)",
                                       HumanBytes(s.relayed_bytes), s.direct_lower_bound_seconds)},
      {"relay buffers",
       s.relay_buffer_bytes == 0
           ? std::string("none (every piece crosses the network into one of its destinations)")
           : absl::StrFormat("%s received by GPUs that are not destinations of it and forwarded "
                             "over NVLink; at most %s on one GPU at once",
                             HumanBytes(s.relay_buffer_bytes),
                             HumanBytes(s.relay_buffer_peak_bytes))},
      {"chosen", Chosen(plan)},
      {"quantization", Quantization(summary)},
      {"plan time", absl::StrFormat("%.3f s", plan.plan_seconds)},
      {"digest", plan.digest},
  };
  if (summary.verified.has_value()) {
    rows.push_back({"verified", absl::StrCat(*summary.verified ? "yes" : "NO", " (",
                                             summary.verify_mode, ")")});
  }
  std::string out;
  for (const auto& [key, value] : rows)
    absl::StrAppend(&out, absl::StrFormat("%-15s %s\n", key, value));
  return out;
}

}  // namespace refit::client

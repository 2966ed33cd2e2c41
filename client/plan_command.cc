#include "client/plan_command.h"

#include <fstream>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/command_line.h"
#include "client/plan_report.h"
#include "client/plan_svg.h"
#include "config/json_files.h"
#include "config/model_files.h"
#include "google/protobuf/util/json_util.h"
#include "planner/check/byte_checker.h"
#include "planner/check/coverage_checker.h"
#include "planner/layout.h"
#include "planner/plan_proto.h"
#include "planner/planner.h"
#include "planner/quantization.h"
#include "planner/reference_refits.h"
#include "planner/topology.h"

namespace refit::client {

const char kPlanUsage[] =
    "usage: refitctl plan (--src SRC.json --dst DST.json | --model CONFIG.json|NAME\n"
    "                      --src-parallel pp=16,ep=16 --dst-parallel tp=32,dp=8\n"
    "                      [--gpus-per-node 8] [--colocated] | --refit NAME)\n"
    "                     [--topology T.json] [--strategy reshard|gather_broadcast|auto]\n"
    "                     [--verify=bytes|coverage] [--json] [--staging-budget 1GiB]\n"
    "                     [--split-threshold 32MiB] [--flat] [--verify-max-bytes 4GiB]\n"
    "                     [--plan-out PLAN.json]  (the plan itself, as refit.v1.Plan JSON)\n"
    "                     [--layouts-out PREFIX]  (the two layouts, as PREFIX.src.json and\n"
    "                      PREFIX.dst.json: what --model expands to, in --src/--dst form)\n"
    "                     [--svg PLAN.svg]  (transfer matrix and link loads, drawn)\n"
    "                     [--dst-quantization block_fp8]  (with --model or --refit: the\n"
    "                      destinations hold the layers' linear weights in FP8 with 128 x 128\n"
    "                      block scales, as DeepSeek-V3's FP8 checkpoint; compared with the\n"
    "                      same refit in the sources' precision)\n"
    "  reference refits: dsv3-h100, dsv3-gb200, qwen3-235b, mini\n"
    "  builtin models: deepseek-v3, dsv3-mini, qwen3-235b-a22b\n"
    "exit status: 0 ok, 1 verification failed, 2 invalid input\n";

namespace {

struct Inputs {
  v1::LayoutSpec sources;
  v1::LayoutSpec destinations;
  v1::Topology topology = planner::DgxH100Topology();
};

absl::StatusOr<Inputs> LoadInputs(const CommandLine& line) {
  Inputs inputs;
  const int modes = (line.Has("src") || line.Has("dst")) + line.Has("model") + line.Has("refit");
  if (modes != 1) {
    return absl::InvalidArgumentError(
        "give exactly one of --src/--dst, --model with parallel settings, or --refit");
  }
  if (line.Has("refit")) {
    absl::StatusOr<planner::RefitScenario> scenario = planner::ReferenceRefit(line.Get("refit"));
    if (!scenario.ok()) return scenario.status();
    inputs.sources = std::move(scenario->sources);
    inputs.destinations = std::move(scenario->destinations);
    inputs.topology = std::move(scenario->topology);
  } else if (line.Has("model")) {
    if (!line.Has("src-parallel") || !line.Has("dst-parallel")) {
      return absl::InvalidArgumentError("--model needs --src-parallel and --dst-parallel");
    }
    absl::StatusOr<v1::ModelConfig> config = config::LoadModelConfig(line.Get("model"));
    if (!config.ok()) return config.status();
    int64_t gpus_per_node = 8;
    if (line.Has("gpus-per-node") &&
        (!absl::SimpleAtoi(line.Get("gpus-per-node"), &gpus_per_node) || gpus_per_node <= 0)) {
      return absl::InvalidArgumentError("--gpus-per-node needs a positive integer");
    }
    absl::StatusOr<planner::RefitScenario> scenario =
        planner::ModelRefit(*config, line.Get("src-parallel"), line.Get("dst-parallel"),
                            gpus_per_node, line.Has("colocated"));
    if (!scenario.ok()) return scenario.status();
    inputs.sources = std::move(scenario->sources);
    inputs.destinations = std::move(scenario->destinations);
  } else {
    if (!line.Has("src") || !line.Has("dst")) {
      return absl::InvalidArgumentError("--src and --dst go together");
    }
    absl::Status status = config::ReadJsonFile(line.Get("src"), &inputs.sources);
    if (status.ok()) status = config::ReadJsonFile(line.Get("dst"), &inputs.destinations);
    if (!status.ok()) return status;
  }
  if (line.Has("dst-quantization")) {
    if (line.Get("dst-quantization") != planner::kBlockFp8) {
      return absl::InvalidArgumentError(absl::StrCat("--dst-quantization must be ",
                                                     planner::kBlockFp8, ", not \"",
                                                     line.Get("dst-quantization"), "\""));
    }
    if (line.Has("src")) {
      return absl::InvalidArgumentError(
          "--dst-quantization goes with --model or --refit (a --dst layout says its own "
          "quantization per tensor)");
    }
    planner::QuantizeLinearWeights(&inputs.destinations);
  }
  if (line.Has("topology")) {
    inputs.topology.Clear();
    absl::Status status = config::ReadJsonFile(line.Get("topology"), &inputs.topology);
    if (!status.ok()) return status;
  }
  return inputs;
}

absl::StatusOr<planner::PlanOptions> LoadOptions(const CommandLine& line) {
  planner::PlanOptions options;
  options.strategy = line.Get("strategy", planner::kStrategyReshard);
  options.hierarchical = !line.Has("flat");
  if (line.Has("staging-budget")) {
    absl::StatusOr<int64_t> bytes = ParseBytes(line.Get("staging-budget"));
    if (!bytes.ok()) return bytes.status();
    options.staging_budget_bytes = *bytes;
  }
  if (line.Has("split-threshold")) {
    absl::StatusOr<int64_t> bytes = ParseBytes(line.Get("split-threshold"));
    if (!bytes.ok()) return bytes.status();
    options.split_threshold_bytes = *bytes;
  }
  return options;
}

// Writes `message` as JSON (proto field names) to `path`; false, said on `err`, if it cannot.
bool WriteJson(const google::protobuf::Message& message, const std::string& path,
               std::ostream& err) {
  std::string json;
  google::protobuf::util::JsonPrintOptions print;
  print.preserve_proto_field_names = true;
  google::protobuf::util::MessageToJsonString(message, &json, print);
  std::ofstream file(path);
  file << json << "\n";
  if (file) return true;
  err << "refitctl plan: cannot write " << path << "\n";
  return false;
}

// The plan of the same refit with every quantized destination tensor in its sources' dtype.
absl::StatusOr<std::shared_ptr<const planner::Plan>> PlanWithoutQuantization(
    const Inputs& inputs, const planner::PlanOptions& options) {
  // Dequantized tensors stay as they are received (codes and scales).
  v1::LayoutSpec plain_sources = inputs.sources;
  v1::LayoutSpec plain = planner::WithoutQuantization(inputs.destinations, inputs.sources);
  std::vector<v1::QuantizedSource> dequantized;
  if (absl::Status received = planner::ReceiveQuantized(&plain_sources, &plain, &dequantized);
      !received.ok()) {
    return received;
  }
  absl::StatusOr<planner::Layout> sources = planner::CompileLayout(plain_sources, "source");
  if (!sources.ok()) return sources.status();
  absl::StatusOr<planner::Layout> destinations = planner::CompileLayout(plain, "destination");
  if (!destinations.ok()) return destinations.status();
  return planner::BuildPlan(*sources, *destinations, inputs.topology, options);
}

}  // namespace

int RunPlanCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  absl::StatusOr<CommandLine> line = CommandLine::Parse(
      args,
      {"src", "dst", "topology", "strategy", "verify", "model", "src-parallel", "dst-parallel",
       "gpus-per-node", "refit", "staging-budget", "split-threshold", "verify-max-bytes",
       "plan-out", "layouts-out", "svg", "dst-quantization"},
      {"json", "colocated", "flat", "help"});
  if (!line.ok()) {
    err << "refitctl plan: " << line.status().message() << "\n" << kPlanUsage;
    return kExitInvalidInput;
  }
  if (line->Has("help")) {
    out << kPlanUsage;
    return kExitOk;
  }
  const std::string verify = line->Get("verify");
  if (!verify.empty() && verify != "bytes" && verify != "coverage") {
    err << "refitctl plan: --verify must be bytes or coverage, not \"" << verify << "\"\n";
    return kExitInvalidInput;
  }
  int64_t verify_max_bytes = int64_t{4} << 30;
  if (line->Has("verify-max-bytes")) {
    absl::StatusOr<int64_t> bytes = ParseBytes(line->Get("verify-max-bytes"));
    if (!bytes.ok()) {
      err << "refitctl plan: --verify-max-bytes: " << bytes.status().message() << "\n";
      return kExitInvalidInput;
    }
    verify_max_bytes = *bytes;
  }
  absl::StatusOr<Inputs> inputs = LoadInputs(*line);
  absl::StatusOr<planner::PlanOptions> options = LoadOptions(*line);
  if (!inputs.ok() || !options.ok()) {
    err << "refitctl plan: "
        << (inputs.ok() ? options.status().message() : inputs.status().message()) << "\n";
    return kExitInvalidInput;
  }
  // Quantized destinations: the sources as sent (codes and block scales), the destinations
  // as received (blocks cut between source ranks arrive wide), and the same refit in the
  // sources' precision planned beside it, to compare.
  v1::LayoutSpec sent = inputs->sources;
  v1::LayoutSpec received = inputs->destinations;
  std::vector<v1::QuantizedSource> quantized, on_arrival;
  absl::Status status = planner::SendQuantized(inputs->destinations, &sent, &quantized);
  if (status.ok()) status = planner::ReceiveQuantized(&sent, &received, &on_arrival);
  if (!status.ok()) {
    err << "refitctl plan: " << status.message() << "\n";
    return kExitInvalidInput;
  }
  std::shared_ptr<const planner::Plan> unquantized;
  if (planner::QuantizesAny(inputs->destinations)) {
    absl::StatusOr<std::shared_ptr<const planner::Plan>> plain =
        PlanWithoutQuantization(*inputs, *options);
    if (!plain.ok()) {
      err << "refitctl plan: the same refit without quantization: " << plain.status().message()
          << "\n";
      return kExitInvalidInput;
    }
    unquantized = *plain;
  }
  absl::StatusOr<planner::Layout> sources = planner::CompileLayout(sent, "source");
  if (!sources.ok()) {
    err << "refitctl plan: " << sources.status().message() << "\n";
    return kExitInvalidInput;
  }
  absl::StatusOr<planner::Layout> destinations = planner::CompileLayout(received, "destination");
  if (!destinations.ok()) {
    err << "refitctl plan: " << destinations.status().message() << "\n";
    return kExitInvalidInput;
  }
  absl::StatusOr<std::shared_ptr<const planner::Plan>> plan =
      planner::BuildPlan(*sources, *destinations, inputs->topology, *options);
  if (!plan.ok()) {
    err << "refitctl plan: " << plan.status().message() << "\n";
    return kExitInvalidInput;
  }
  if (line->Has("plan-out") && !WriteJson(planner::PlanToProto(**plan, *sources, *destinations),
                                          line->Get("plan-out"), err)) {
    return kExitInvalidInput;
  }
  if (line->Has("layouts-out")) {
    const std::string prefix = line->Get("layouts-out");
    if (!WriteJson(inputs->sources, prefix + ".src.json", err) ||
        !WriteJson(inputs->destinations, prefix + ".dst.json", err)) {
      return kExitInvalidInput;
    }
  }
  PlanReportOptions report;
  report.verify = verify;
  report.verify_max_bytes = verify_max_bytes;
  report.json = line->Has("json");
  report.svg_path = line->Get("svg");
  report.topology = &inputs->topology;
  report.unquantized = unquantized.get();
  std::set<std::string> arriving, dequantized;
  for (const v1::QuantizedSource& q : on_arrival) {
    (q.scheme() == planner::kDequantize ? dequantized : arriving).insert(q.tensor());
  }
  report.tensors_quantized_on_arrival = static_cast<int64_t>(arriving.size());
  report.tensors_dequantized = static_cast<int64_t>(dequantized.size());
  return VerifyAndReport(**plan, *sources, *destinations, report, out, err);
}

int VerifyAndReport(const planner::Plan& plan, const planner::Layout& sources,
                    const planner::Layout& destinations, const PlanReportOptions& options,
                    std::ostream& out, std::ostream& err) {
  PlanSummary summary{&plan,
                      &sources,
                      &destinations,
                      std::nullopt,
                      options.verify,
                      options.unquantized,
                      options.tensors_quantized_on_arrival,
                      options.tensors_dequantized};
  absl::Status verdict;
  if (options.verify == "bytes") {
    verdict = check::CheckBytes(sources, destinations, plan, options.verify_max_bytes);
    if (absl::IsResourceExhausted(verdict)) {
      err << "refitctl plan: " << verdict.message() << "\n";
      return kExitInvalidInput;
    }
  } else if (options.verify == "coverage") {
    verdict = check::CheckCoverage(sources, destinations, plan);
  }
  if (!options.verify.empty()) summary.verified = verdict.ok();
  if (!options.svg_path.empty()) {
    std::ofstream file(options.svg_path);
    file << PlanSvg(summary,
                    options.topology != nullptr ? *options.topology : planner::DgxH100Topology());
    if (!file) {
      err << "refitctl plan: cannot write " << options.svg_path << "\n";
      return kExitInvalidInput;
    }
  }
  out << (options.json ? PlanReportJson(summary) : PlanReportTable(summary));
  if (!verdict.ok()) {
    err << "refitctl plan: verification failed: " << verdict.message() << "\n";
    return kExitVerifyFailed;
  }
  return kExitOk;
}

}  // namespace refit::client

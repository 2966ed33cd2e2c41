#include "planner/reference_refits.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"
#include "planner/builtin_models.h"
#include "planner/dtype.h"
#include "planner/topology.h"

namespace refit::planner {
namespace {

struct ReferenceRow {
  const char* name;
  const char* model;
  const char* sources;
  const char* destinations;
  const char* why;
  bool gb200;
};

constexpr ReferenceRow kReferenceRefits[] = {
    {"dsv3-h100", "deepseek-v3", "pp=16,ep=16", "tp=32,dp=8",
     "published: 14.9 s gather-and-broadcast, 2.6 s Reshard on DGX H100", false},
    {"dsv3-gb200", "deepseek-v3", "pp=4,ep=16,dp=2", "tp=8,dp=16",
     "published: 1.45 s hierarchical vs 3.84 s direct (NCCL M2N, GB200 NVL72)", true},
    {"qwen3-235b", "qwen3-235b-a22b", "tp=2,pp=4,ep=16", "tp=8,dp=8", "a second MoE family", false},
    {"mini", "dsv3-mini", "pp=2,ep=2", "tp=2,dp=2", "the demo and the CPU end-to-end tests", false},
};

// GB200 NVL72: 4 GPUs per compute tray, 18 trays per NVLink domain, NVLink 5 at 900 GB/s
// per direction per GPU, one 400 Gb/s NIC per GPU. Trays are numbered across the
// trainers first, then the inference hosts.
v1::Topology Gb200Topology(const v1::LayoutSpec& sources, const v1::LayoutSpec& destinations) {
  v1::Topology topology = DgxH100Topology();
  topology.set_name("gb200-nvl72");
  topology.set_nvlink_gbytes_per_s(900);
  int64_t tray = 0;
  std::string last_host;
  for (const v1::LayoutSpec* side : {&sources, &destinations}) {
    for (const v1::RankLayout& rank : side->ranks()) {
      if (rank.host() == last_host) continue;
      last_host = rank.host();
      v1::HostPlacement* placement = topology.add_hosts();
      placement->set_host(rank.host());
      placement->set_nvlink_domain(absl::StrCat("nvl72-", tray++ / 18));
    }
  }
  return topology;
}

}  // namespace

std::vector<std::string> ReferenceRefitNames() {
  std::vector<std::string> names;
  for (const ReferenceRow& row : kReferenceRefits) names.push_back(row.name);
  return names;
}

absl::StatusOr<v1::ModelConfig> ParseModelConfig(const std::string& json, const std::string& what) {
  v1::ModelConfig config;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  auto status = google::protobuf::util::JsonStringToMessage(json, &config, options);
  if (!status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": malformed model config JSON: ", status.message().as_string()));
  }
  return config;
}

absl::StatusOr<v1::ModelConfig> BuiltinModelConfig(const std::string& name) {
  std::string known;
  for (const BuiltinModel& model : BuiltinModels()) {
    if (model.name == name) return ParseModelConfig(model.json, name);
    absl::StrAppend(&known, known.empty() ? "" : ", ", model.name);
  }
  return absl::NotFoundError(
      absl::StrCat("no builtin model \"", name, "\" (builtin: ", known, ")"));
}

absl::StatusOr<RefitScenario> ModelRefit(const v1::ModelConfig& config,
                                         const std::string& source_parallel,
                                         const std::string& destination_parallel,
                                         int64_t gpus_per_node, bool colocated) {
  absl::StatusOr<ModelTensors> model = ExpandModel(config);
  if (!model.ok()) return model.status();
  absl::StatusOr<v1::ParallelConfig> src_parallel = ParseParallel(source_parallel);
  if (!src_parallel.ok()) return src_parallel.status();
  absl::StatusOr<v1::ParallelConfig> dst_parallel = ParseParallel(destination_parallel);
  if (!dst_parallel.ok()) return dst_parallel.status();
  if (gpus_per_node > 0) {
    src_parallel->set_gpus_per_node(gpus_per_node);
    dst_parallel->set_gpus_per_node(gpus_per_node);
  }
  RefitScenario scenario;
  scenario.model = config.name();
  scenario.source_parallel = source_parallel;
  scenario.destination_parallel = destination_parallel;
  absl::StatusOr<v1::LayoutSpec> sources =
      TrainingLayout(*model, *src_parallel, colocated ? "node-" : "train-node-");
  if (!sources.ok()) return sources.status();
  absl::StatusOr<v1::LayoutSpec> destinations =
      InferenceLayout(*model, *dst_parallel, colocated ? "node-" : "infer-node-");
  if (!destinations.ok()) return destinations.status();
  scenario.sources = std::move(*sources);
  scenario.destinations = std::move(*destinations);
  scenario.topology = DgxH100Topology();
  scenario.model_bytes = model->ParameterCount() * *DtypeBytes(model->dtype);
  return scenario;
}

absl::StatusOr<RefitScenario> ReferenceRefit(const std::string& name) {
  for (const ReferenceRow& row : kReferenceRefits) {
    if (name != row.name) continue;
    absl::StatusOr<v1::ModelConfig> config = BuiltinModelConfig(row.model);
    if (!config.ok()) return config.status();
    absl::StatusOr<RefitScenario> scenario =
        ModelRefit(*config, row.sources, row.destinations, row.gb200 ? 4 : 8, false);
    if (!scenario.ok()) return scenario.status();
    scenario->name = row.name;
    scenario->why = row.why;
    if (row.gb200) scenario->topology = Gb200Topology(scenario->sources, scenario->destinations);
    return scenario;
  }
  return absl::NotFoundError(absl::StrCat("no reference refit \"", name, "\""));
}

}  // namespace refit::planner

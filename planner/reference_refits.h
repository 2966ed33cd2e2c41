// The reference refits of docs/models/README.md (dsv3-h100, dsv3-gb200, qwen3-235b,
// mini) as ready layouts and topologies, for the benchmark, the demo and the tests.
#ifndef REFIT_PLANNER_REFERENCE_REFITS_H_
#define REFIT_PLANNER_REFERENCE_REFITS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "planner/model_spec.h"
#include "proto/refit.pb.h"

namespace refit::planner {

struct RefitScenario {
  std::string name;
  std::string model;
  std::string source_parallel;       // "pp=16,ep=16"
  std::string destination_parallel;  // "tp=32,dp=8"
  std::string why;
  v1::LayoutSpec sources;
  v1::LayoutSpec destinations;
  v1::Topology topology;
  int64_t model_bytes = 0;
};

// Names of the reference refits, in table order.
std::vector<std::string> ReferenceRefitNames();

// Builds one reference refit by name.
absl::StatusOr<RefitScenario> ReferenceRefit(const std::string& name);

// A builtin model config by name ("deepseek-v3", "dsv3-mini", "qwen3-235b-a22b").
absl::StatusOr<v1::ModelConfig> BuiltinModelConfig(const std::string& name);

// Parses a model config from its JSON text (unknown fields are ignored: they are
// config.json numbers the layouts do not need).
absl::StatusOr<v1::ModelConfig> ParseModelConfig(const std::string& json, const std::string& what);

// Layouts of a model under source and destination parallel settings, on hosts named
// "train-node-N" / "infer-node-N" ("node-N" for both when colocated).
absl::StatusOr<RefitScenario> ModelRefit(const v1::ModelConfig& config,
                                         const std::string& source_parallel,
                                         const std::string& destination_parallel,
                                         int64_t gpus_per_node, bool colocated);

}  // namespace refit::planner

#endif  // REFIT_PLANNER_REFERENCE_REFITS_H_

// Model configs by builtin name ("dsv3-mini") or by path to a config JSON, as job files
// and the synthetic ranks name them.
#ifndef REFIT_CONFIG_MODEL_FILES_H_
#define REFIT_CONFIG_MODEL_FILES_H_

#include <string>

#include "absl/status/statusor.h"
#include "planner/reference_refits.h"
#include "proto/refit.pb.h"

namespace refit::config {

// The builtin config of that name, else the JSON file at that path (a name with no '/'
// and no ".json" is only looked up among the builtin configs).
absl::StatusOr<v1::ModelConfig> LoadModelConfig(const std::string& name_or_path);

// Layouts of the model under both parallel settings (hosts train-node-N / infer-node-N).
absl::StatusOr<planner::RefitScenario> LoadModelRefit(const std::string& name_or_path,
                                                      const std::string& source_parallel,
                                                      const std::string& destination_parallel,
                                                      int32_t gpus_per_node = 8);

}  // namespace refit::config

#endif  // REFIT_CONFIG_MODEL_FILES_H_

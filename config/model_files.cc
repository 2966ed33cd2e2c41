#include "config/model_files.h"

#include "absl/strings/match.h"
#include "config/json_files.h"

namespace refit::config {

absl::StatusOr<v1::ModelConfig> LoadModelConfig(const std::string& name_or_path) {
  absl::StatusOr<v1::ModelConfig> config = planner::BuiltinModelConfig(name_or_path);
  // A word that names no file (no '/', no ".json") was meant as a builtin name: say which
  // names there are rather than that no such file exists.
  if (config.ok() ||
      (name_or_path.find('/') == std::string::npos && !absl::EndsWith(name_or_path, ".json"))) {
    return config;
  }
  config = v1::ModelConfig();
  absl::Status read = ReadJsonFile(name_or_path, &*config, /*ignore_unknown_fields=*/true);
  if (!read.ok()) return read;
  return config;
}

absl::StatusOr<planner::RefitScenario> LoadModelRefit(const std::string& name_or_path,
                                                      const std::string& source_parallel,
                                                      const std::string& destination_parallel,
                                                      int32_t gpus_per_node) {
  absl::StatusOr<v1::ModelConfig> config = LoadModelConfig(name_or_path);
  if (!config.ok()) return config.status();
  return planner::ModelRefit(*config, source_parallel, destination_parallel, gpus_per_node, false);
}

}  // namespace refit::config

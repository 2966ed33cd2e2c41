// The model configs shipped with refit (planner/models/*.json), compiled into the binary.
#ifndef REFIT_PLANNER_BUILTIN_MODELS_H_
#define REFIT_PLANNER_BUILTIN_MODELS_H_

#include <string>
#include <vector>

namespace refit::planner {

struct BuiltinModel {
  std::string name;  // file name without .json: "deepseek-v3", "dsv3-mini", ...
  std::string json;
};

const std::vector<BuiltinModel>& BuiltinModels();

}  // namespace refit::planner

#endif  // REFIT_PLANNER_BUILTIN_MODELS_H_

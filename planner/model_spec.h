// Model expansion: a model config (deepseek_v3 or qwen3_moe) and a parallel setting give
// the LayoutSpec of one side of a refit, by the conventions of docs/models/README.md:
// Megatron for trainers (sources), vLLM for inference engines (destinations).
#ifndef REFIT_PLANNER_MODEL_SPEC_H_
#define REFIT_PLANNER_MODEL_SPEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "planner/box.h"
#include "proto/refit.pb.h"

namespace refit::planner {

// How a weight is split under tensor parallelism.
enum class ShardRule {
  kReplicated,  // norms, q_a/kv_a, router
  kColumn,      // split along dim 0
  kRow,         // split along dim 1
  kKvColumn,    // dim 0 by whole KV heads; replicated heads when TP exceeds the head count
  kExpertUp,    // stacked experts [E, mi, h]: EP along dim 0, TP inside along dim 1
  kExpertDown,  // stacked experts [E, h, mi]: EP along dim 0, TP inside along dim 2
};

struct ModelTensor {
  std::string name;
  Dims shape;
  ShardRule rule = ShardRule::kReplicated;
  int64_t layer = -1;        // -1: not in a decoder layer
  bool first_stage = false;  // embed_tokens
  bool last_stage = false;   // norm, lm_head
};

struct ModelTensors {
  std::string dtype;
  int64_t num_layers = 0;
  int64_t kv_heads = 0;  // for kKvColumn
  int64_t head_dim = 0;
  std::vector<ModelTensor> tensors;

  int64_t ParameterCount() const;
};

absl::StatusOr<ModelTensors> ExpandModel(const v1::ModelConfig& config);

// "pp=16,ep=16" -> ParallelConfig. Unknown keys and non-positive values are errors.
absl::StatusOr<v1::ParallelConfig> ParseParallel(absl::string_view text);

// Megatron layout of the trainers: ranks ordered TP fastest, then EP, then DP, then PP.
// Hosts are "<host_prefix><rank / gpus_per_node>".
absl::StatusOr<v1::LayoutSpec> TrainingLayout(const ModelTensors& model,
                                              const v1::ParallelConfig& parallel,
                                              const std::string& host_prefix);

// vLLM layout of the inference engines: ranks ordered TP fastest, then DP.
absl::StatusOr<v1::LayoutSpec> InferenceLayout(const ModelTensors& model,
                                               const v1::ParallelConfig& parallel,
                                               const std::string& host_prefix);

}  // namespace refit::planner

#endif  // REFIT_PLANNER_MODEL_SPEC_H_

// Fuzz target: a model config and two parallel settings as an operator writes them in a
// job (first line: the trainers' setting, second line: the inference setting, the rest:
// the model config as JSON), expanded into both layouts and validated.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/str_split.h"
#include "google/protobuf/stubs/logging.h"
#include "google/protobuf/util/json_util.h"
#include "planner/layout.h"
#include "planner/model_spec.h"
#include "proto/refit.pb.h"

// Invalid UTF-8 in string fields is an ordinary parse failure here, not worth a log line.
static const bool kQuietProtobuf = [] {
  google::protobuf::SetLogHandler(nullptr);
  return true;
}();

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> parts = absl::StrSplit(text, absl::MaxSplits('\n', 2));
  if (parts.size() < 3) return 0;
  refit::v1::ModelConfig config;
  if (!google::protobuf::util::JsonStringToMessage(parts[2], &config).ok()) return 0;
  auto model = refit::planner::ExpandModel(config);
  auto training = refit::planner::ParseParallel(parts[0]);
  auto inference = refit::planner::ParseParallel(parts[1]);
  if (!model.ok() || !training.ok() || !inference.ok()) return 0;
  // Keep to sizes a fuzzer can go through quickly; big ones are the planner's benchmark.
  if (model->tensors.size() > 512) return 0;
  for (const refit::v1::ParallelConfig* p : {&*training, &*inference}) {
    for (int64_t degree : {p->tp(), p->pp(), p->ep(), p->dp(), p->etp()}) {
      if (degree > 256) return 0;
    }
    if (p->tp() * p->pp() * p->ep() * p->dp() > 256) return 0;
  }
  auto sources = refit::planner::TrainingLayout(*model, *training, "train-");
  auto destinations = refit::planner::InferenceLayout(*model, *inference, "infer-");
  if (sources.ok()) refit::planner::CompileLayout(*sources, "source").IgnoreError();
  if (destinations.ok()) {
    refit::planner::CompileLayout(*destinations, "destination").IgnoreError();
  }
  return 0;
}

// Reading proto3-JSON files (layouts, topologies, model configs) with errors that name
// the file and what is wrong with it.
#ifndef REFIT_CONFIG_JSON_FILES_H_
#define REFIT_CONFIG_JSON_FILES_H_

#include <string>

#include "absl/status/statusor.h"
#include "google/protobuf/message.h"

namespace refit::config {

absl::StatusOr<std::string> ReadFile(const std::string& path);

// Parses `path` into `message`; unknown fields are errors unless `ignore_unknown_fields`.
absl::Status ReadJsonFile(const std::string& path, google::protobuf::Message* message,
                          bool ignore_unknown_fields = false);

}  // namespace refit::config

#endif  // REFIT_CONFIG_JSON_FILES_H_

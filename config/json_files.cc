#include "config/json_files.h"

#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"

namespace refit::config {

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open file"));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": read failed"));
  return text.str();
}

absl::Status ReadJsonFile(const std::string& path, google::protobuf::Message* message,
                          bool ignore_unknown_fields) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status();
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = ignore_unknown_fields;
  auto status = google::protobuf::util::JsonStringToMessage(*text, message, options);
  if (!status.ok()) {
    // The parser's message may carry an excerpt on further lines; keep the first.
    std::string reason = status.message().as_string();
    reason = reason.substr(0, reason.find('\n'));
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": malformed JSON for ", message->GetTypeName(), ": ", reason));
  }
  return absl::OkStatus();
}

}  // namespace refit::config

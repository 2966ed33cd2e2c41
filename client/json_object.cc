#include "client/json_object.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace refit::client {

void JsonObject::Int(const char* key, int64_t value) { Field(key, absl::StrCat(value)); }

void JsonObject::Real(const char* key, double value) { Field(key, absl::StrFormat("%.6g", value)); }

void JsonObject::Text(const char* key, const std::string& value) {
  std::string quoted = "\"";
  for (char c : value) {
    if (c == '"' || c == '\\') {
      quoted += '\\';
      quoted += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      absl::StrAppendFormat(&quoted, "\\u%04x", c);
    } else {
      quoted += c;
    }
  }
  Field(key, quoted + "\"");
}

void JsonObject::Bool(const char* key, bool value) { Field(key, value ? "true" : "false"); }

void JsonObject::Field(const char* key, const std::string& value) {
  absl::StrAppend(&body_, body_.empty() ? "" : ", ", "\"", key, "\": ", value);
}

}  // namespace refit::client

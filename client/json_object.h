// One flat JSON object written field by field, for refitctl's --json output: numbers,
// strings (escaped) and bools.
#ifndef REFIT_CLIENT_JSON_OBJECT_H_
#define REFIT_CLIENT_JSON_OBJECT_H_

#include <cstdint>
#include <string>

namespace refit::client {

class JsonObject {
 public:
  void Int(const char* key, int64_t value);
  void Real(const char* key, double value);
  void Text(const char* key, const std::string& value);
  void Bool(const char* key, bool value);
  // "{...}"
  std::string Object() const { return "{" + body_ + "}"; }
  // "{...}\n"
  std::string Done() const { return Object() + "\n"; }

 private:
  void Field(const char* key, const std::string& value);
  std::string body_;
};

}  // namespace refit::client

#endif  // REFIT_CLIENT_JSON_OBJECT_H_

// A small command-line reader for refitctl: a subcommand followed by `--name=value`,
// `--name value` or boolean `--name` flags (names keep their dashes, as users type them).
#ifndef REFIT_CLIENT_COMMAND_LINE_H_
#define REFIT_CLIENT_COMMAND_LINE_H_

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace refit::client {

class CommandLine {
 public:
  // `value_flags` take a value, `bool_flags` do not; anything else is an error.
  static absl::StatusOr<CommandLine> Parse(const std::vector<std::string>& args,
                                           const std::set<std::string>& value_flags,
                                           const std::set<std::string>& bool_flags);

  bool Has(const std::string& name) const { return values_.count(name) > 0; }
  std::string Get(const std::string& name, const std::string& fallback = "") const;

 private:
  std::map<std::string, std::string> values_;
};

// "1GiB", "512MiB", "4096" -> bytes.
absl::StatusOr<int64_t> ParseBytes(const std::string& text);

}  // namespace refit::client

#endif  // REFIT_CLIENT_COMMAND_LINE_H_

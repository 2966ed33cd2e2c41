#include "client/command_line.h"

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace refit::client {

absl::StatusOr<CommandLine> CommandLine::Parse(const std::vector<std::string>& args,
                                               const std::set<std::string>& value_flags,
                                               const std::set<std::string>& bool_flags) {
  CommandLine line;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (!absl::StartsWith(arg, "--")) {
      return absl::InvalidArgumentError(absl::StrCat("unexpected argument \"", arg, "\""));
    }
    std::string name = arg.substr(2), value;
    const size_t eq = name.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (bool_flags.count(name)) {
      if (inline_value && value != "true" && value != "false") {
        return absl::InvalidArgumentError(absl::StrCat("--", name, " takes no value"));
      }
      if (!inline_value || value == "true") line.values_[name] = "true";
      continue;
    }
    if (!value_flags.count(name)) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    }
    if (!inline_value) {
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
      }
      value = args[++i];
    }
    line.values_[name] = value;
  }
  return line;
}

std::string CommandLine::Get(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

absl::StatusOr<int64_t> ParseBytes(const std::string& text) {
  static constexpr std::pair<const char*, int64_t> kUnits[] = {{"GiB", int64_t{1} << 30},
                                                               {"MiB", int64_t{1} << 20},
                                                               {"KiB", int64_t{1} << 10},
                                                               {"GB", 1000000000},
                                                               {"MB", 1000000},
                                                               {"KB", 1000},
                                                               {"B", 1}};
  for (const auto& [suffix, scale] : kUnits) {
    if (!absl::EndsWith(text, suffix)) continue;
    int64_t value = 0;
    if (absl::SimpleAtoi(text.substr(0, text.size() - std::string(suffix).size()), &value) &&
        value > 0) {
      return value * scale;
    }
    break;
  }
  int64_t value = 0;
  if (absl::SimpleAtoi(text, &value) && value > 0) return value;
  return absl::InvalidArgumentError(
      absl::StrCat("\"", text, "\" is not a positive byte count (e.g. 1GiB, 256MiB, 4096)"));
}

}  // namespace refit::client

// What `--help` prints for a refit program: `usage` first, then the flags its main file
// defines (absl lists only the files named like the program by default, and the
// coordinator's main file is not named refit-coordinator).
#ifndef REFIT_DAEMON_PROGRAM_USAGE_H_
#define REFIT_DAEMON_PROGRAM_USAGE_H_

#include <string>

#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"

namespace refit::daemon {

// Call before absl::ParseCommandLine. `main_file`: the file whose flags --help lists
// ("coordinator/coordinator_main.cc").
inline void SetProgramUsage(const std::string& usage, const char* main_file) {
  absl::SetProgramUsageMessage(usage);
  absl::FlagsUsageConfig config;
  config.contains_help_flags = [main_file](absl::string_view file) {
    return absl::EndsWith(file, main_file);
  };
  absl::SetFlagsUsageConfig(config);
}

}  // namespace refit::daemon

#endif  // REFIT_DAEMON_PROGRAM_USAGE_H_

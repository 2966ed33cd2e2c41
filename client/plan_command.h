// `refitctl plan`: plans a refit offline (no daemons) from layout files, a model and
// parallel settings, or a reference refit, then prints a report and optionally verifies.
#ifndef REFIT_CLIENT_PLAN_COMMAND_H_
#define REFIT_CLIENT_PLAN_COMMAND_H_

#include <ostream>
#include <string>
#include <vector>

namespace refit::client {

inline constexpr int kExitOk = 0;
inline constexpr int kExitVerifyFailed = 1;
inline constexpr int kExitInvalidInput = 2;

// Runs the command on `args` (after "plan"); returns the process exit code.
int RunPlanCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

extern const char kPlanUsage[];

}  // namespace refit::client

#endif  // REFIT_CLIENT_PLAN_COMMAND_H_

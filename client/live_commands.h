// refitctl's commands that talk to a running coordinator: `status` and `refit`.
#ifndef REFIT_CLIENT_LIVE_COMMANDS_H_
#define REFIT_CLIENT_LIVE_COMMANDS_H_

#include <ostream>
#include <string>
#include <vector>

namespace refit::client {

// `refitctl status --coordinator HOST:PORT [--json]`
int RunStatusCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// `refitctl refit --coordinator HOST:PORT --version N [--timeout-ms MS] [--json]`
int RunRefitCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// `refitctl layouts --coordinator HOST:PORT [--ranks] [--json]`: a line per node, or per rank
int RunLayoutsCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace refit::client

#endif  // REFIT_CLIENT_LIVE_COMMANDS_H_

// refitctl: the refit command line. `plan` works offline; the live commands (status,
// refit, layouts) talk to a coordinator; `doctor` checks the node it runs on.
#include <iostream>
#include <string>
#include <vector>

#include "client/doctor_command.h"
#include "client/live_commands.h"
#include "client/plan_command.h"

int main(int argc, char** argv) {
  const std::string usage =
      "usage: refitctl <command> [flags]\n"
      "commands:\n"
      "  plan    plan a refit offline and report its cost (refitctl plan --help)\n"
      "  status  the coordinator's view: daemons, current version, last epochs\n"
      "  refit   run a refit epoch for a version and print its report\n"
      "  layouts the layouts and placement the coordinator has registered\n"
      "  doctor  check this node for what refit needs and say what to fix\n"
      "exit status of status, refit and layouts: 0 ok, 1 the refit's checksums found wrong\n"
      "  bytes (DATA_LOSS), 2 bad flags, 3 the call failed (the coordinator unreachable, the\n"
      "  request refused, the epoch failed): stderr names the gRPC code and the reason\n";
  if (argc < 2) {
    std::cerr << usage;
    return refit::client::kExitInvalidInput;
  }
  const std::string command = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  if (command == "plan") return refit::client::RunPlanCommand(args, std::cout, std::cerr);
  if (command == "status") return refit::client::RunStatusCommand(args, std::cout, std::cerr);
  if (command == "refit") return refit::client::RunRefitCommand(args, std::cout, std::cerr);
  if (command == "layouts") return refit::client::RunLayoutsCommand(args, std::cout, std::cerr);
  if (command == "doctor") return refit::client::RunDoctorCommand(args, std::cout, std::cerr);
  if (command == "--help" || command == "help") {
    std::cout << usage;
    return 0;
  }
  std::cerr << "refitctl: unknown command \"" << command << "\"\n" << usage;
  return refit::client::kExitInvalidInput;
}

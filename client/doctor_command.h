// `refitctl doctor`: checks a node for what refit needs and says what to fix. The refitd
// socket (there, the caller's, owner-only), refitd answering on it, GPUs and the CUDA
// driver, NCCL and UCX versions, shared-memory space, the memlock limit, and (with
// --coordinator) the coordinator answering and knowing this node's refitd.
#ifndef REFIT_CLIENT_DOCTOR_COMMAND_H_
#define REFIT_CLIENT_DOCTOR_COMMAND_H_

#include <ostream>
#include <string>
#include <vector>

namespace refit::client {

struct DoctorCheck {
  enum Status { kOk, kWarn, kFail };
  std::string name;
  Status status = kOk;
  std::string detail;  // what was found
  std::string fix;     // what to do, when not ok
};

// Exit status 0 when nothing failed (warnings allowed), 1 otherwise, 2 for bad flags.
int RunDoctorCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace refit::client

#endif  // REFIT_CLIENT_DOCTOR_COMMAND_H_

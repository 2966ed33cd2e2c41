#include "client/doctor_command.h"

#include <grpcpp/grpcpp.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/command_line.h"
#include "client/daemon_clients.h"
#include "client/json_object.h"
#include "client/plan_command.h"
#include "client/plan_report.h"
#include "proto/health.grpc.pb.h"
#include "transport/gpu/gpu_support.h"

namespace refit::client {
namespace {

const char kDoctorUsage[] =
    "usage: refitctl doctor [--socket /run/refit/refitd.sock] [--coordinator HOST:PORT]\n"
    "                       [--node NAME] [--shm-need BYTES] [--json]\n"
    "exit status: 0 nothing failed (warnings allowed), 1 something failed, 2 bad flags\n";

DoctorCheck CheckSocket(const std::string& socket) {
  DoctorCheck check{"refitd socket"};
  struct stat info;
  if (stat(socket.c_str(), &info) != 0) {
    check.status = DoctorCheck::kFail;
    check.detail = absl::StrCat(socket, ": ", std::strerror(errno));
    check.fix = "start refitd (systemctl start refitd), or pass its --socket";
    return check;
  }
  if (!S_ISSOCK(info.st_mode)) {
    check.status = DoctorCheck::kFail;
    check.detail = absl::StrCat(socket, " is not a socket");
    check.fix = "point --socket at the path refitd was started with";
    return check;
  }
  const int mode = info.st_mode & 0777;
  check.detail = absl::StrFormat("%s: uid %d, mode %03o", socket, info.st_uid, mode);
  if (info.st_uid != geteuid()) {
    check.status = DoctorCheck::kFail;
    check.fix = absl::StrCat("run refitd as this user (uid ", geteuid(),
                             "): refitd maps only its own user's shared memory");
  } else if (mode & 0077) {
    check.status = DoctorCheck::kWarn;
    check.fix = "other users can register ranks: restart refitd (it creates the socket 600)";
  }
  return check;
}

DoctorCheck CheckDaemon(const std::string& socket) {
  DoctorCheck check{"refitd"};
  auto health = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel("unix:" + socket, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(3));
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status status =
      health->Check(&context, grpc::health::v1::HealthCheckRequest(), &response);
  if (!status.ok()) {
    check.status = DoctorCheck::kFail;
    check.detail = absl::StrCat("no answer on the socket: ", status.error_message());
    check.fix = "refitd is not running or hung: look at its log (journalctl -u refitd)";
  } else if (response.status() != grpc::health::v1::HealthCheckResponse::SERVING) {
    check.status = DoctorCheck::kFail;
    check.detail = "answers, but not serving";
    check.fix = "look at refitd's log";
  } else {
    check.detail = "answers on the socket (grpc.health.v1: SERVING)";
  }
  return check;
}

DoctorCheck CheckGpu() {
  DoctorCheck check{"GPU, CUDA, NCCL"};
  const transport::gpu::GpuSupport gpu = transport::gpu::DetectGpu();
  check.detail = gpu.description;
  if (!gpu.built) {
    check.status = DoctorCheck::kWarn;
    check.fix = "this build has no GPU data plane: build with CUDA and NCCL present";
  } else if (!gpu.available) {
    check.status = DoctorCheck::kWarn;
    check.fix = "host memory only here; for GPU weights install the NVIDIA driver (CUDA 13)";
  }
  return check;
}

DoctorCheck CheckUcx() {
  DoctorCheck check{"UCX"};
  unsigned major = 0, minor = 0, release = 0;
  ucp_get_version(&major, &minor, &release);
  check.detail = absl::StrCat("UCX ", ucp_get_version_string());
  if (major < 1 || (major == 1 && minor < 13)) {
    check.status = DoctorCheck::kWarn;
    check.fix = "refit is tested with UCX 1.13 or newer (Debian 12: libucx0)";
  }
  return check;
}

DoctorCheck CheckSharedMemory(int64_t need) {
  DoctorCheck check{"shared memory"};
  struct statvfs info;
  if (statvfs("/dev/shm", &info) != 0) {
    check.status = DoctorCheck::kFail;
    check.detail = absl::StrCat("/dev/shm: ", std::strerror(errno));
    check.fix = "mount a tmpfs on /dev/shm (containers: an emptyDir with medium Memory)";
    return check;
  }
  const double free_bytes = static_cast<double>(info.f_bavail) * info.f_frsize;
  const double total = static_cast<double>(info.f_blocks) * info.f_frsize;
  check.detail = absl::StrCat("/dev/shm: ", HumanBytes(free_bytes), " free of ", HumanBytes(total));
  if (need > 0 && free_bytes < need) {
    check.status = DoctorCheck::kFail;
    check.fix = absl::StrCat("the node's ranks need ", HumanBytes(need),
                             ": enlarge /dev/shm (mount -o remount,size=...)");
  } else if (free_bytes < 1e9) {
    check.status = DoctorCheck::kWarn;
    check.fix = "under 1 GB free: host-memory ranks will not fit; enlarge /dev/shm";
  }
  return check;
}

DoctorCheck CheckMemlock() {
  DoctorCheck check{"memlock limit"};
  struct rlimit limit;
  getrlimit(RLIMIT_MEMLOCK, &limit);
  if (limit.rlim_cur == RLIM_INFINITY) {
    check.detail = "unlimited";
  } else {
    check.detail = HumanBytes(static_cast<double>(limit.rlim_cur));
    if (limit.rlim_cur < (uint64_t{1} << 30)) {
      check.status = DoctorCheck::kWarn;
      check.fix =
          "RDMA registration of large buffers needs it raised (ulimit -l unlimited; "
          "systemd: LimitMEMLOCK=infinity)";
    }
  }
  return check;
}

DoctorCheck CheckCoordinator(const std::string& address, const std::string& node) {
  DoctorCheck check{"coordinator"};
  absl::StatusOr<v1::StatusResponse> status = CoordinatorClient(address).Status();
  if (!status.ok()) {
    check.status = DoctorCheck::kFail;
    check.detail = absl::StrCat(address, ": ", status.status().message());
    check.fix =
        "check the address, the network, and TLS/token settings (REFIT_TLS_*, "
        "REFIT_TOKEN_FILE)";
    return check;
  }
  check.detail = absl::StrCat(address, ": version ", status->current_version(), ", ",
                              status->daemons_size(), " daemons");
  if (!node.empty()) {
    bool found = false;
    for (const std::string& daemon : status->daemons()) found = found || daemon == node;
    if (found) {
      absl::StrAppend(&check.detail, ", ", node, " among them");
    } else {
      check.status = DoctorCheck::kFail;
      absl::StrAppend(&check.detail, "; ", node, " is not among them");
      check.fix =
          "refitd here cannot reach the coordinator: compare its --coordinator and "
          "look at its log";
    }
  }
  return check;
}

const char* StatusName(DoctorCheck::Status status) {
  switch (status) {
    case DoctorCheck::kOk:
      return "ok";
    case DoctorCheck::kWarn:
      return "warn";
    default:
      return "FAIL";
  }
}

}  // namespace

int RunDoctorCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  absl::StatusOr<CommandLine> line =
      CommandLine::Parse(args, {"socket", "coordinator", "node", "shm-need"}, {"json", "help"});
  int64_t need = 0;
  if (line.ok() && line->Has("shm-need")) {
    absl::StatusOr<int64_t> bytes = ParseBytes(line->Get("shm-need"));
    if (!bytes.ok()) {
      err << "refitctl doctor: --shm-need: " << bytes.status().message() << "\n";
      return kExitInvalidInput;
    }
    need = *bytes;
  }
  if (!line.ok()) {
    err << "refitctl doctor: " << line.status().message() << "\n" << kDoctorUsage;
    return kExitInvalidInput;
  }
  if (line->Has("help")) {
    out << kDoctorUsage;
    return kExitOk;
  }
  const std::string socket = line->Get("socket", "/run/refit/refitd.sock");
  std::vector<DoctorCheck> checks;
  checks.push_back(CheckSocket(socket));
  if (checks.back().status != DoctorCheck::kFail) checks.push_back(CheckDaemon(socket));
  checks.push_back(CheckGpu());
  checks.push_back(CheckUcx());
  checks.push_back(CheckSharedMemory(need));
  checks.push_back(CheckMemlock());
  if (line->Has("coordinator")) {
    checks.push_back(CheckCoordinator(line->Get("coordinator"), line->Get("node")));
  }
  bool failed = false;
  for (const DoctorCheck& check : checks) failed = failed || check.status == DoctorCheck::kFail;
  if (line->Has("json")) {
    std::vector<std::string> items;
    for (const DoctorCheck& check : checks) {
      JsonObject item;
      item.Text("check", check.name);
      item.Text("status", StatusName(check.status));
      item.Text("detail", check.detail);
      item.Text("fix", check.fix);
      items.push_back(item.Object());
    }
    out << "[" << absl::StrJoin(items, ",\n ") << "]\n";
  } else {
    for (const DoctorCheck& check : checks) {
      out << absl::StrFormat("%-16s %-4s  %s\n", check.name, StatusName(check.status),
                             check.detail);
      if (!check.fix.empty()) out << absl::StrFormat("%-22s fix: %s\n", "", check.fix);
    }
    out << (failed ? "something needs fixing (FAIL above)\n" : "nothing failed\n");
  }
  return failed ? kExitVerifyFailed : kExitOk;
}

}  // namespace refit::client

#include "client/live_commands.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "client/command_line.h"
#include "client/daemon_clients.h"
#include "client/plan_command.h"
#include "client/plan_report.h"
#include "google/protobuf/util/json_util.h"

namespace refit::client {
namespace {

std::string Json(const google::protobuf::Message& message) {
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  google::protobuf::util::MessageToJsonString(message, &json, options);
  return json + "\n";
}

std::string ReportLine(const v1::RefitReport& report) {
  return absl::StrFormat("%-16s version %-6d %10s in %8.3f s  (%.2f GB/s)", report.epoch_id(),
                         report.version(), HumanBytes(report.bytes()), report.seconds(),
                         report.bytes() / std::max(report.seconds(), 1e-9) / 1e9);
}

}  // namespace

int RunStatusCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  absl::StatusOr<CommandLine> line = CommandLine::Parse(args, {"coordinator"}, {"json"});
  if (!line.ok() || !line->Has("coordinator")) {
    err << "usage: refitctl status --coordinator HOST:PORT [--json]\n";
    return kExitInvalidInput;
  }
  absl::StatusOr<v1::StatusResponse> status = CoordinatorClient(line->Get("coordinator")).Status();
  if (!status.ok()) {
    err << "refitctl status: " << status.status().message() << "\n";
    return kExitVerifyFailed;
  }
  if (line->Has("json")) {
    out << Json(*status);
    return kExitOk;
  }
  out << "current version  " << status->current_version() << "\n";
  out << "plan digest      " << (status->plan_digest().empty() ? "-" : status->plan_digest())
      << "\n";
  out << "daemons          " << status->daemons_size() << "\n";
  for (const std::string& daemon : status->daemons()) out << "  " << daemon << "\n";
  out << "last epochs\n";
  for (const v1::RefitReport& report : status->last_epochs())
    out << "  " << ReportLine(report) << "\n";
  return kExitOk;
}

int RunRefitCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  absl::StatusOr<CommandLine> line =
      CommandLine::Parse(args, {"coordinator", "version", "timeout-ms"}, {"json"});
  int64_t version = 0, timeout_ms = 60000;
  if (!line.ok() || !line->Has("coordinator") ||
      !absl::SimpleAtoi(line->Get("version"), &version) ||
      (line->Has("timeout-ms") &&
       (!absl::SimpleAtoi(line->Get("timeout-ms"), &timeout_ms) || timeout_ms <= 0))) {
    err << "usage: refitctl refit --coordinator HOST:PORT --version N [--timeout-ms MS] "
           "[--json]\n";
    return kExitInvalidInput;
  }
  absl::StatusOr<v1::RefitReport> report =
      CoordinatorClient(line->Get("coordinator")).Refit(version, absl::Milliseconds(timeout_ms));
  if (!report.ok()) {
    err << "refitctl refit: " << report.status().message() << "\n";
    return kExitVerifyFailed;
  }
  out << (line->Has("json") ? Json(*report) : ReportLine(*report) + "\n");
  return kExitOk;
}

}  // namespace refit::client

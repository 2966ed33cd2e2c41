#include "client/live_commands.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <thread>
#include <tuple>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
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

// On a terminal, a line cut to its width; elsewhere (pipes, files) the whole line.
std::string FitTerminal(const std::string& text) {
  struct winsize size;
  if (!isatty(STDOUT_FILENO) || ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) != 0 || size.ws_col < 20 ||
      text.size() <= size.ws_col) {
    return text;
  }
  return text.substr(0, size.ws_col - 3) + "...";
}

// "0-7,16,18-19": sorted ranks as ranges, cut short past 24 characters.
std::string RankRanges(std::vector<int64_t> ranks) {
  std::sort(ranks.begin(), ranks.end());
  std::string text;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!text.empty()) text += ",";
    absl::StrAppend(&text, ranks[i]);
    if (j > i) absl::StrAppend(&text, "-", ranks[j]);
    i = j + 1;
  }
  if (text.size() > 24) text = text.substr(0, 21) + "...";
  return text;
}

// A live command's failed call: its kind and message on stderr, and the exit status.
int RequestFailed(const char* command, const absl::Status& status, std::ostream& err) {
  err << "refitctl " << command << ": " << absl::StatusCodeToString(status.code()) << ": "
      << status.message() << "\n";
  return absl::IsDataLoss(status) ? kExitVerifyFailed : kExitRequestFailed;
}

// Before the usage: what of the command line could not be parsed (an unknown flag, a flag
// without its value), if that is what went wrong.
void SayWhatIsWrong(const char* command, const absl::Status& parsed, std::ostream& err) {
  if (!parsed.ok()) err << "refitctl " << command << ": " << parsed.message() << "\n";
}

}  // namespace

int RunStatusCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  absl::StatusOr<CommandLine> line = CommandLine::Parse(args, {"coordinator"}, {"json"});
  if (!line.ok() || !line->Has("coordinator")) {
    SayWhatIsWrong("status", line.status(), err);
    err << "usage: refitctl status --coordinator HOST:PORT [--json]\n";
    return kExitInvalidInput;
  }
  absl::StatusOr<v1::StatusResponse> status = CoordinatorClient(line->Get("coordinator")).Status();
  if (!status.ok()) return RequestFailed("status", status.status(), err);
  if (line->Has("json")) {
    out << Json(*status);
    return kExitOk;
  }
  out << "current version  " << status->current_version() << "\n";
  out << "plan digest      " << (status->plan_digest().empty() ? "-" : status->plan_digest())
      << "\n";
  out << "daemons          " << status->daemons_size() << "\n";
  for (int d = 0; d < status->daemons_size(); ++d) {
    std::string daemon = "  " + status->daemons(d);
    if (d < status->daemon_gpus_size() && !status->daemon_gpus(d).empty()) {
      absl::StrAppend(&daemon, "  [GPU: ", status->daemon_gpus(d), "]");
    }
    out << FitTerminal(daemon) << "\n";
  }
  if (status->replicas_size() > 0) {
    std::map<std::string, int> by_state;
    for (const v1::ReplicaStatus& replica : status->replicas()) ++by_state[replica.state()];
    std::vector<std::string> counts;
    for (const auto& [state, count] : by_state) counts.push_back(absl::StrCat(count, " ", state));
    out << "replicas         " << absl::StrJoin(counts, ", ") << "\n";
    for (const v1::ReplicaStatus& replica : status->replicas()) {
      std::string row = absl::StrFormat("  %-6d %-12s", replica.replica(), replica.state());
      if (replica.missing_ranks_size() > 0) {
        absl::StrAppend(&row, " missing ranks ", absl::StrJoin(replica.missing_ranks(), ", "));
      }
      if (replica.nodes_size() > 0)
        absl::StrAppend(&row, "  on ", absl::StrJoin(replica.nodes(), ", "));
      out << FitTerminal(row) << "\n";
      // Whole: it says what to fix.
      if (!replica.reason().empty()) out << "         why: " << replica.reason() << "\n";
    }
  }
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
    SayWhatIsWrong("refit", line.status(), err);
    err << "usage: refitctl refit --coordinator HOST:PORT --version N [--timeout-ms MS] "
           "[--json]\n";
    return kExitInvalidInput;
  }
  CoordinatorClient coordinator(line->Get("coordinator"));
  // A progress bar on stderr while the epoch runs (stdout keeps only the report); with
  // --json, nothing but the report, on stdout.
  const bool json = line->Has("json");
  grpc::ClientContext watch_context;
  std::atomic<bool> watching{false}, watch_done{json};
  std::thread watcher([&]() {
    if (json) return;
    coordinator
        .WatchEpochOf(
            version,
            [&](const v1::EpochProgress& p) {
              watching = true;
              const double fraction =
                  p.bytes_total() > 0 ? static_cast<double>(p.bytes_done()) / p.bytes_total() : 0;
              const int filled = static_cast<int>(fraction * 30);
              err << absl::StrFormat("\r%s [%s%s] %3.0f%%  %s / %s", p.epoch_id(),
                                     std::string(filled, '#'), std::string(30 - filled, '.'),
                                     100 * fraction, HumanBytes(p.bytes_done()),
                                     HumanBytes(p.bytes_total()))
                  << (p.finished() ? (p.committed() ? "  committed\n" : "  aborted\n") : "")
                  << std::flush;
            },
            absl::Milliseconds(timeout_ms), &watch_context)
        .IgnoreError();  // the report below says what happened
    watch_done = true;
  });
  absl::StatusOr<v1::RefitReport> report =
      coordinator.Refit(version, absl::Milliseconds(timeout_ms));
  // Let the bar show the end of the epoch it watched; a refit that ran no epoch (refused,
  // or a repeat of a committed version) leaves the watcher waiting: cancel it.
  for (int i = 0; i < 200 && report.ok() && watching && !watch_done; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  watch_context.TryCancel();
  watcher.join();
  if (!report.ok()) return RequestFailed("refit", report.status(), err);
  out << (line->Has("json") ? Json(*report) : ReportLine(*report) + "\n");
  if (!line->Has("json") && !report->slowest_node().empty()) {
    out << absl::StrFormat(
        "  slowest node %s (%.3f s), slowest destination rank %d (%.3f s), %d views and %d "
        "pieces checksummed\n",
        report->slowest_node(), report->slowest_node_seconds(), report->slowest_rank(),
        report->slowest_rank_seconds(), report->views_checksummed(), report->pieces_checksummed());
  }
  if (!line->Has("json") && report->replicas_size() > 0) {
    out << "  " << (report->catch_up() ? "caught up" : "to") << " replicas "
        << absl::StrJoin(report->replicas(), ", ");
    if (report->dropped_replicas_size() > 0) {
      out << "; dropped replicas " << absl::StrJoin(report->dropped_replicas(), ", ")
          << " (lost during the epoch)";
    }
    out << "\n";
  }
  if (!line->Has("json") && report->missing_source_ranks_size() > 0) {
    out << "  source ranks " << absl::StrJoin(report->missing_source_ranks(), ", ")
        << " were missing: their data came from the other sources\n";
  }
  return kExitOk;
}

int RunLayoutsCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  absl::StatusOr<CommandLine> line = CommandLine::Parse(args, {"coordinator"}, {"json", "ranks"});
  if (!line.ok() || !line->Has("coordinator")) {
    SayWhatIsWrong("layouts", line.status(), err);
    err << "usage: refitctl layouts --coordinator HOST:PORT [--ranks] [--json]\n"
           "  (a line per node; --ranks: a line per rank)\n";
    return kExitInvalidInput;
  }
  absl::StatusOr<v1::LayoutsResponse> layouts =
      CoordinatorClient(line->Get("coordinator")).Layouts();
  if (!layouts.ok()) return RequestFailed("layouts", layouts.status(), err);
  if (line->Has("json")) {
    out << Json(*layouts);
    return kExitOk;
  }
  std::map<int32_t, std::string> node_of;
  for (const v1::DaemonPeer& d : layouts->daemons()) node_of[d.index()] = d.node();
  std::map<std::pair<int, int64_t>, int32_t> daemon_of;
  for (const v1::RankPlacement& p : layouts->placement())
    daemon_of[{p.role(), p.rank()}] = p.daemon();
  for (auto [spec, role, name] :
       {std::make_tuple(&layouts->sources(), v1::ROLE_SOURCE, "sources"),
        std::make_tuple(&layouts->destinations(), v1::ROLE_DESTINATION, "destinations")}) {
    out << name << ": " << spec->ranks_size() << " ranks, " << spec->tensors_size() << " tensors\n";
    if (line->Has("ranks")) {
      for (const v1::RankLayout& rank : spec->ranks()) {
        out << absl::StrFormat("  rank %-5d %-16s device %-3d %5d views  on %s\n", rank.rank(),
                               rank.host(), rank.device(), rank.views_size(),
                               node_of[daemon_of[{role, rank.rank()}]]);
      }
      continue;
    }
    // A line per refitd: which ranks it serves (as ranges) and their views.
    std::map<std::string, std::vector<int64_t>> ranks_on;
    std::map<std::string, int64_t> views_on;
    for (const v1::RankLayout& rank : spec->ranks()) {
      const std::string& node = node_of[daemon_of[{role, rank.rank()}]];
      ranks_on[node].push_back(rank.rank());
      views_on[node] += rank.views_size();
    }
    for (auto& [node, ranks] : ranks_on) {
      out << absl::StrFormat("  %-24s %5d ranks %7d views  on %s\n", RankRanges(ranks),
                             ranks.size(), views_on[node], node);
    }
  }
  return kExitOk;
}

}  // namespace refit::client

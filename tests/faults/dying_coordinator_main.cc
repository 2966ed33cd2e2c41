// refit-dying-coordinator (tests only): refit's coordinator, which dies (exit code 9, no
// clean-up, as under kill -9) in the middle of the first commit it sends: just before its
// K-th commit message of its first epoch goes out on a control stream
// (--die_before_commit=K), or just after (--die_after_commit=K). The commit fault test kills the
// coordinator this way at random points of the commit, which a signal from outside could not hit.
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/synchronization/mutex.h"
#include "config/json_files.h"
#include "coordinator/coordinator_server.h"
#include "coordinator/job_validation.h"
#include "daemon/shutdown_signal.h"
#include "proto/refit.pb.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:0", "HOST:PORT to serve on");
ABSL_FLAG(std::string, job, "", "the refit group, a refit.v1.JobSpec JSON file (rank counts)");
ABSL_FLAG(int, die_before_commit, 0, "die just before the K-th commit message (0: never)");
ABSL_FLAG(int, die_after_commit, 0, "die just after the K-th commit message (0: never)");

namespace {

std::atomic<int> commits_seen{0};
// The first epoch this coordinator runs: only its commit messages count (not those that
// settle an older epoch a daemon is in doubt about).
absl::Mutex first_epoch_mu;
std::string first_epoch ABSL_GUARDED_BY(first_epoch_mu);

bool IsFirstEpochsCommit(const refit::v1::CoordinatorMessage& message) {
  absl::MutexLock lock(&first_epoch_mu);
  if (message.has_execute() && first_epoch.empty()) first_epoch = message.execute().epoch_id();
  return message.has_commit() && message.commit().epoch_id() == first_epoch;
}

// Counts the commit messages the coordinator sends its daemons and dies at the chosen one.
class DieAtCommit : public grpc::experimental::Interceptor {
 public:
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    using grpc::experimental::InterceptionHookPoints;
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_MESSAGE)) {
      const auto* message =
          static_cast<const refit::v1::CoordinatorMessage*>(methods->GetSendMessage());
      sending_commit_ = message != nullptr && IsFirstEpochsCommit(*message);
      if (sending_commit_ && commits_seen.load() + 1 == absl::GetFlag(FLAGS_die_before_commit)) {
        Die("before");
      }
    }
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_SEND_MESSAGE) &&
        sending_commit_) {
      if (++commits_seen == absl::GetFlag(FLAGS_die_after_commit)) Die("after");
    }
    methods->Proceed();
  }

 private:
  static void Die(const char* when) {
    spdlog::warn("refit-dying-coordinator: dying {} commit message {}", when,
                 commits_seen.load() + (when[0] == 'b' ? 1 : 0));
    spdlog::default_logger()->flush();
    _exit(9);
  }
  bool sending_commit_ = false;
};

class DieAtCommitFactory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    if (std::string(info->method()) != "/refit.v1.CoordinatorControl/Control") return nullptr;
    return new DieAtCommit;
  }
};

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const sigset_t signals = refit::daemon::BlockShutdownSignals();
  refit::v1::JobSpec job;
  if (absl::Status read = refit::config::ReadJsonFile(absl::GetFlag(FLAGS_job), &job); !read.ok()) {
    spdlog::error("refit-dying-coordinator: {}", std::string(read.message()));
    return 2;
  }
  if (absl::Status valid = refit::daemon::CheckJob(job); !valid.ok()) {
    spdlog::error("refit-dying-coordinator: {}", std::string(valid.message()));
    return 2;
  }
  refit::daemon::CoordinatorServer::Interceptors interceptors;
  interceptors.push_back(std::make_unique<DieAtCommitFactory>());
  absl::StatusOr<std::unique_ptr<refit::daemon::CoordinatorServer>> server =
      refit::daemon::CoordinatorServer::Start(
          absl::GetFlag(FLAGS_listen), job,
          absl::Milliseconds(job.epoch_deadline_ms() > 0 ? job.epoch_deadline_ms() : 60000),
          nullptr, {}, std::move(interceptors));
  if (!server.ok()) {
    spdlog::error("refit-dying-coordinator: {}", std::string(server.status().message()));
    return 1;
  }
  spdlog::info("refit-dying-coordinator listening on {}", (*server)->address());
  refit::daemon::WaitForShutdownSignal(signals);
  server->reset();
  return 0;
}

#include "tests/adversarial/processes.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/time/clock.h"

namespace refit::testing {
namespace {

int CountEntries(const std::string& folder) {
  DIR* dir = opendir(folder.c_str());
  if (dir == nullptr) return -1;
  int count = 0;
  while (const dirent* entry = readdir(dir)) count += entry->d_name[0] != '.';
  closedir(dir);
  return count;
}

}  // namespace

ChildProcess::ChildProcess(std::vector<std::string> argv, std::string log)
    : log_(std::move(log)) {
  const int fd = open(log_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  // Built before the fork: the child of a threaded process may only make async-signal-safe
  // calls until it execs (an allocation could wait forever on a lock another thread held).
  std::vector<char*> args;
  for (std::string& arg : argv) args.push_back(arg.data());
  args.push_back(nullptr);
  pid_ = fork();
  if (pid_ == 0) {
    dup2(fd, 1);
    dup2(fd, 2);
    execv(args[0], args.data());
    _exit(127);
  }
  close(fd);
}

ChildProcess::~ChildProcess() {
  if (pid_ <= 0 || reaped_) return;
  kill(pid_, SIGTERM);
  if (AwaitExit(absl::Seconds(10)) < 0) {
    kill(pid_, SIGKILL);
    AwaitExit(absl::Seconds(5));
  }
}

bool ChildProcess::Alive() {
  if (reaped_) return false;
  const pid_t done = waitpid(pid_, &status_, WNOHANG);
  if (done == pid_) reaped_ = true;
  return !reaped_;
}

int ChildProcess::AwaitExit(absl::Duration limit) {
  const absl::Time give_up = absl::Now() + limit;
  while (Alive() && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(20));
  if (!reaped_) return -1;
  return WIFEXITED(status_) ? WEXITSTATUS(status_) : 128 + WTERMSIG(status_);
}

int ChildProcess::Threads() const {
  return CountEntries("/proc/" + std::to_string(pid_) + "/task");
}

int ChildProcess::OpenFiles() const { return CountEntries("/proc/" + std::to_string(pid_) + "/fd"); }

std::string ChildProcess::Log() const {
  std::ifstream in(log_);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string ChildProcess::AwaitLine(const std::string& text, absl::Duration limit) const {
  const absl::Time give_up = absl::Now() + limit;
  do {
    std::istringstream lines(Log());
    for (std::string line; std::getline(lines, line);) {
      if (absl::StrContains(line, text)) return line;
    }
    absl::SleepFor(absl::Milliseconds(20));
  } while (absl::Now() < give_up);
  return "";
}

std::string RunfilesPath(const std::string& binary) {
  char* cwd = getcwd(nullptr, 0);
  std::string path = std::string(cwd) + "/" + binary;
  free(cwd);
  return path;
}

std::string ScratchFolder(const std::string& prefix) {
  std::string pattern = "/tmp/" + prefix + "-XXXXXX";
  return mkdtemp(pattern.data()) == nullptr ? "" : pattern;
}

int SegmentsNamed(const std::string& prefix) {
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return -1;
  int count = 0;
  while (const dirent* entry = readdir(dir)) count += absl::StartsWith(entry->d_name, prefix);
  closedir(dir);
  return count;
}

}  // namespace refit::testing

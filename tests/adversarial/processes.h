// Test helpers: refit's daemons started as real child processes, and what the tests read
// off them from outside (alive, threads, open descriptors, log lines).
#ifndef REFIT_TESTS_ADVERSARIAL_PROCESSES_H_
#define REFIT_TESTS_ADVERSARIAL_PROCESSES_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/time/time.h"

namespace refit::testing {

class ChildProcess {
 public:
  // Starts `argv` with stdout and stderr appended to `log`.
  ChildProcess(std::vector<std::string> argv, std::string log);
  ~ChildProcess();  // SIGTERM, then SIGKILL after 10 s
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  // Still running (not exited, not killed by a signal).
  bool Alive();
  // How it ended (waits up to `limit`): the exit code, or 128 + signal; -1 if still running.
  int AwaitExit(absl::Duration limit);
  int Threads() const;
  int OpenFiles() const;
  std::string Log() const;
  // Waits up to `limit` for `text` in the log; returns the first line holding it or "".
  std::string AwaitLine(const std::string& text, absl::Duration limit) const;

 private:
  pid_t pid_ = -1;
  int status_ = -1;
  bool reaped_ = false;
  std::string log_;
};

// `binary` started from the test's runfiles ("refitd/refitd").
std::string RunfilesPath(const std::string& binary);

// A fresh folder under the test's temporary directory (short: unix socket paths are).
std::string ScratchFolder(const std::string& prefix);

// Shared-memory segments in /dev/shm whose name starts with `prefix`.
int SegmentsNamed(const std::string& prefix);

}  // namespace refit::testing

#endif  // REFIT_TESTS_ADVERSARIAL_PROCESSES_H_

// An exclusive claim on a path, held for this object's lifetime: a lock file beside it
// ("<path>.lock", flock'd, holding the pid). A second refitd started on a live socket
// finds the lock taken and refuses, naming the pid that holds it; a socket left by a
// refitd that died is stale (nobody holds its lock) and is taken over.
#ifndef REFIT_REFITD_PID_LOCK_H_
#define REFIT_REFITD_PID_LOCK_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace refit::daemon {

class PidLock {
 public:
  // FAILED_PRECONDITION naming the holder's pid when another process holds it.
  static absl::StatusOr<std::unique_ptr<PidLock>> Acquire(const std::string& path);
  ~PidLock();
  PidLock(const PidLock&) = delete;
  PidLock& operator=(const PidLock&) = delete;

 private:
  PidLock(std::string lock_path, int fd) : lock_path_(std::move(lock_path)), fd_(fd) {}
  std::string lock_path_;
  int fd_;
};

}  // namespace refit::daemon

#endif  // REFIT_REFITD_PID_LOCK_H_

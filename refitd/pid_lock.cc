#include "refitd/pid_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace refit::daemon {

absl::StatusOr<std::unique_ptr<PidLock>> PidLock::Acquire(const std::string& path) {
  const std::string lock_path = path + ".lock";
  const int fd = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot open ", lock_path, ": ", std::strerror(errno)));
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    char holder[32] = {};
    const ssize_t read_bytes = pread(fd, holder, sizeof(holder) - 1, 0);
    close(fd);
    if (error != EWOULDBLOCK) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot lock ", lock_path, ": ", std::strerror(error)));
    }
    const std::string pid(
        absl::StripAsciiWhitespace(std::string(holder, read_bytes > 0 ? read_bytes : 0)));
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is served by another refitd (pid ", pid.empty() ? "unknown" : pid,
                     ", holding ", lock_path, "); stop it or pick another --socket"));
  }
  const std::string pid = absl::StrCat(getpid(), "\n");
  if (ftruncate(fd, 0) != 0 || pwrite(fd, pid.data(), pid.size(), 0) < 0) {
    close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat("cannot write ", lock_path, ": ", std::strerror(errno)));
  }
  return std::unique_ptr<PidLock>(new PidLock(lock_path, fd));
}

PidLock::~PidLock() {
  // The lock file stays (removing it could let two later starts lock different files);
  // only an empty pid is left for whoever reads it next.
  if (ftruncate(fd_, 0) != 0) {
    // Nothing to do: the lock goes with the descriptor either way.
  }
  close(fd_);
}

}  // namespace refit::daemon

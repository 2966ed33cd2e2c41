#include "transport/shared_memory.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "transport/memory_fault_guard.h"
#include "transport/page_touch.h"

namespace refit::transport {
namespace {

absl::Status Errno(const std::string& name, const char* call) {
  const int error = errno;
  const std::string text =
      absl::StrCat("shared memory \"", name, "\": ", call, ": ", std::strerror(error));
  switch (error) {
    case ENOENT:
      return absl::NotFoundError(text);
    case EEXIST:
      return absl::AlreadyExistsError(text);
    case EACCES:
      return absl::PermissionDeniedError(text);
    case ENOMEM:
    case ENOSPC:
    case EMFILE:  // out of descriptors: the process's limit (ulimit -n) or the system's
    case ENFILE:
      return absl::ResourceExhaustedError(text);
    default:
      return absl::InternalError(text);
  }
}

absl::Status CheckName(const std::string& name) {
  if (name.size() < 2 || name[0] != '/' || name.find('/', 1) != std::string::npos ||
      name.size() > 255) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shared memory \"", name, "\": a name is \"/\" followed by 1 to 254 characters, no \"/\""));
  }
  return absl::OkStatus();
}

// Closes a descriptor when the scope ends.
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() {
    if (fd_ >= 0) close(fd_);
  }
  void Release() { fd_ = -1; }

 private:
  int fd_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<SharedMemorySegment>> SharedMemorySegment::Create(
    const std::string& name, int64_t bytes, bool locked_while_alive) {
  absl::Status valid = CheckName(name);
  if (!valid.ok()) return valid;
  if (bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared memory \"", name, "\": size ", bytes, " is not positive"));
  }
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return Errno(name, "shm_open");
  FdCloser closer(fd);
  // The lock comes before the size: a sized segment nobody locks is an orphan.
  if (locked_while_alive && flock(fd, LOCK_SH) != 0) {
    absl::Status status = Errno(name, "flock");
    shm_unlink(name.c_str());
    return status;
  }
  if (ftruncate(fd, bytes) != 0) {
    absl::Status status = Errno(name, "ftruncate");
    shm_unlink(name.c_str());
    return status;
  }
  void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) {
    absl::Status status = Errno(name, "mmap");
    shm_unlink(name.c_str());
    return status;
  }
  int lock_fd = -1;
  if (locked_while_alive) {
    closer.Release();
    lock_fd = fd;
  }
  return std::unique_ptr<SharedMemorySegment>(new SharedMemorySegment(
      name, static_cast<uint8_t*>(data), bytes, /*owner=*/true, -1, lock_fd));
}

bool IsOrphan(const std::string& name) {
  if (!CheckName(name).ok()) return false;
  const int fd = shm_open(name.c_str(), O_RDONLY, 0);
  if (fd < 0) return false;
  FdCloser closer(fd);
  struct stat info;
  if (fstat(fd, &info) != 0 || info.st_uid != geteuid() || info.st_size == 0) return false;
  // Our own exclusive lock goes with `closer`.
  return flock(fd, LOCK_EX | LOCK_NB) == 0;
}

absl::StatusOr<std::unique_ptr<SharedMemorySegment>> SharedMemorySegment::Open(
    const std::string& name, int64_t min_bytes) {
  absl::Status valid = CheckName(name);
  if (!valid.ok()) return valid;
  const int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) return Errno(name, "shm_open");
  FdCloser closer(fd);
  struct stat info;
  if (fstat(fd, &info) != 0) return Errno(name, "fstat");
  if (info.st_uid != geteuid()) {
    return absl::PermissionDeniedError(absl::StrCat("shared memory \"", name, "\" belongs to uid ",
                                                    info.st_uid, ", not to this process's uid ",
                                                    geteuid()));
  }
  if (info.st_size < min_bytes || info.st_size == 0) {
    return absl::InvalidArgumentError(absl::StrCat("shared memory \"", name, "\" holds ",
                                                   info.st_size, " bytes, fewer than the ",
                                                   min_bytes, " its views need"));
  }
  void* data = mmap(nullptr, info.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) return Errno(name, "mmap");
  // Ranks create their segments sparse: a page not yet allocated on a full /dev/shm would
  // be a SIGBUS at the data plane's first write. Prefaulting every page writable either
  // backs it now or fails here (no signal: the kernel reports EFAULT or ENOMEM instead),
  // and the data plane's first epoch no longer pays the first touch.
  int error = madvise(data, info.st_size, MADV_POPULATE_WRITE) == 0 ? 0 : errno;
  if (error == EINVAL) {
    // Kernels before 5.14 lack MADV_POPULATE_WRITE: reserving the pages (ENOSPC on a full
    // tmpfs) backs them too, only without prefaulting the mapping.
    error = posix_fallocate(fd, 0, info.st_size);
  }
  if (error != 0) {
    munmap(data, info.st_size);
    if (error == EFAULT || error == ENOMEM || error == ENOSPC) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "shared memory \"", name, "\": its ", info.st_size,
          " bytes cannot all be backed (/dev/shm is full, or the segment shrank while mapping)"));
    }
    errno = error;
    return Errno(name, "backing its pages");
  }
  // The kernel's page tables are full now; a shadow MMU's are filled by touching.
  absl::Status touched =
      GuardMemoryAccess(absl::StrCat("touching the pages of shared memory \"", name, "\""),
                        [&] { TouchEveryPage(static_cast<const uint8_t*>(data), info.st_size); });
  if (!touched.ok()) {
    munmap(data, info.st_size);
    return touched;
  }
  closer.Release();
  return std::unique_ptr<SharedMemorySegment>(new SharedMemorySegment(
      name, static_cast<uint8_t*>(data), info.st_size, /*owner=*/false, fd));
}

absl::Status SharedMemorySegment::CheckBacked() const {
  if (fd_ < 0) return absl::OkStatus();  // created here: only this process sizes it
  struct stat info;
  if (fstat(fd_, &info) != 0) return Errno(name_, "fstat");
  if (info.st_size < bytes_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "shared memory \"", name_, "\" was truncated to ", info.st_size, " bytes after it was ",
        "registered with ", bytes_, "; refit will not touch it (register the rank again)"));
  }
  return absl::OkStatus();
}

bool SharedMemorySegment::StillNamed() const {
  if (fd_ < 0) return true;  // created here: the name is this process's
  const int named = shm_open(name_.c_str(), O_RDONLY, 0);
  if (named < 0) return false;
  FdCloser closer(named);
  struct stat now, mapped;
  if (fstat(named, &now) != 0 || fstat(fd_, &mapped) != 0) return false;
  return now.st_dev == mapped.st_dev && now.st_ino == mapped.st_ino;
}

absl::Status UnlinkSharedMemory(const std::string& name) {
  absl::Status valid = CheckName(name);
  if (!valid.ok()) return valid;
  if (shm_unlink(name.c_str()) != 0 && errno != ENOENT) return Errno(name, "shm_unlink");
  return absl::OkStatus();
}

SharedMemorySegment::~SharedMemorySegment() {
  munmap(data_, bytes_);
  if (fd_ >= 0) close(fd_);
  if (owner_) shm_unlink(name_.c_str());
  if (lock_fd_ >= 0) close(lock_fd_);  // after the unlink: never an orphan while named
}

}  // namespace refit::transport

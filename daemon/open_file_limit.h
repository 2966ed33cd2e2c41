// Raises this process's soft limit on open files to its hard limit. refitd keeps a
// descriptor per registered shared-memory segment and both daemons one per connection;
// the default soft limit (1024) is reached by a real model's registrations or by a burst
// of connections, and the hard limit is what the administrator allowed.
#ifndef REFIT_DAEMON_OPEN_FILE_LIMIT_H_
#define REFIT_DAEMON_OPEN_FILE_LIMIT_H_

#include <cstdint>

namespace refit::daemon {

// The soft limit in force afterwards.
int64_t RaiseOpenFileLimit();

// The soft limit in force now (INT64_MAX: none).
int64_t OpenFileLimit();
// The descriptors this process holds open now (-1: /proc/self/fd cannot be read).
int64_t OpenFileCount();

// Registrations may hold descriptors (one per mapped shared-memory segment) up to half the
// limit: the connection listener sheds connections past three quarters, so the quarter
// between stays for clients however much is registered.
inline int64_t RegistrationDescriptorBudget(int64_t limit) { return limit / 2; }

}  // namespace refit::daemon

#endif  // REFIT_DAEMON_OPEN_FILE_LIMIT_H_

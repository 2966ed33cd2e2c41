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

}  // namespace refit::daemon

#endif  // REFIT_DAEMON_OPEN_FILE_LIMIT_H_

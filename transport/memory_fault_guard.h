// Turns a SIGBUS raised while refitd touches a mapped buffer into an error of that access
// instead of the end of the process. POSIX shared memory cannot be sealed: a rank's
// process may shrink its segment (ftruncate) after refitd checked its size at the start of
// an epoch, and the next read or write of the lost pages raises SIGBUS. Host copies,
// checksums and the staged commit run under this guard; the epoch that hit the fault
// fails naming the address, and refitd stays up.
//
// How: a SIGBUS handler (installed once, chained to the one before it for faults outside a
// guard) jumps back to the guard that is active on the faulting thread. The access must
// be plain memory work (copies, hashes): what it allocated on the way is not released.
#ifndef REFIT_TRANSPORT_MEMORY_FAULT_GUARD_H_
#define REFIT_TRANSPORT_MEMORY_FAULT_GUARD_H_

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace refit::transport {

// Runs `access` on this thread. DATA_LOSS naming `what` and the faulting address if it
// raised SIGBUS; guards nest.
absl::Status GuardMemoryAccess(absl::string_view what, absl::FunctionRef<void()> access);

}  // namespace refit::transport

#endif  // REFIT_TRANSPORT_MEMORY_FAULT_GUARD_H_

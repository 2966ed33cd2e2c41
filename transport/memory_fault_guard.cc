#include "transport/memory_fault_guard.h"

#include <setjmp.h>
#include <signal.h>

#include <atomic>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace refit::transport {
namespace {

// The guard active on this thread (null outside one), and where its fault hit.
thread_local sigjmp_buf* active_guard = nullptr;
thread_local uintptr_t fault_address = 0;
// What handled SIGBUS before this guard's handler: faults outside a guard go there. Set
// once per (re)install, read by the handler; never freed, so a handler running during a
// reinstall reads a whole one.
std::atomic<const struct sigaction*> previous_handler{nullptr};

void OnBusError(int signal, siginfo_t* info, void* context) {
  // Only a fault of this thread's own access (si_code > 0), not a SIGBUS sent by kill.
  if (sigjmp_buf* guard = active_guard; guard != nullptr && info->si_code > 0) {
    active_guard = nullptr;
    fault_address = reinterpret_cast<uintptr_t>(info->si_addr);
    siglongjmp(*guard, 1);
  }
  // Not inside a guard: whatever handled SIGBUS before decides.
  const struct sigaction* previous = previous_handler.load();
  if (previous != nullptr && (previous->sa_flags & SA_SIGINFO) && previous->sa_sigaction) {
    previous->sa_sigaction(signal, info, context);
    return;
  }
  if (previous != nullptr && previous->sa_handler != SIG_DFL && previous->sa_handler != SIG_IGN) {
    previous->sa_handler(signal);
    return;
  }
  // The default (an ignored SIGBUS from a fault would re-fault forever): end the process
  // with the signal, as it would have without this handler.
  struct sigaction default_action = {};
  default_action.sa_handler = SIG_DFL;
  sigemptyset(&default_action.sa_mask);
  sigaction(SIGBUS, &default_action, nullptr);
  if (info->si_code <= 0) raise(SIGBUS);  // sent, not a fault: returning would not re-raise
}

absl::Mutex install_mu;

// Makes OnBusError the SIGBUS handler unless it already is (another library, UCX among
// them, may have put its own in since), chained to the one it replaces.
void EnsureInstalled() {
  struct sigaction current = {};
  if (sigaction(SIGBUS, nullptr, &current) == 0 && (current.sa_flags & SA_SIGINFO) &&
      current.sa_sigaction == OnBusError) {
    return;
  }
  absl::MutexLock lock(&install_mu);
  if (sigaction(SIGBUS, nullptr, &current) == 0 && (current.sa_flags & SA_SIGINFO) &&
      current.sa_sigaction == OnBusError) {
    return;
  }
  previous_handler.store(new struct sigaction(current));
  struct sigaction action = {};
  action.sa_sigaction = OnBusError;
  // SA_NODEFER: SIGBUS stays unblocked after the jump, so the guard need not save the mask
  // (no system call to restore it).
  action.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  sigaction(SIGBUS, &action, nullptr);
}

}  // namespace

absl::Status GuardMemoryAccess(absl::string_view what, absl::FunctionRef<void()> access) {
  EnsureInstalled();
  sigjmp_buf guard;
  sigjmp_buf* const outer = active_guard;
  if (sigsetjmp(guard, 0) != 0) {
    active_guard = outer;
    return absl::DataLossError(absl::StrCat(
        what, ": the memory at 0x", absl::Hex(fault_address),
        " is gone (SIGBUS): its shared-memory segment was truncated while refitd used it"));
  }
  // No object with a destructor lives in this frame: the jump back skips destructors.
  active_guard = &guard;
  try {
    access();
  } catch (...) {
    active_guard = outer;
    throw;
  }
  active_guard = outer;
  return absl::OkStatus();
}

}  // namespace refit::transport

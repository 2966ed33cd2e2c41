#include "transport/memory_fault_guard.h"

#include <setjmp.h>
#include <signal.h>

#include <cstdint>
#include <mutex>

#include "absl/strings/str_cat.h"

namespace refit::transport {
namespace {

// The guard active on this thread (null outside one), and where its fault hit.
thread_local sigjmp_buf* active_guard = nullptr;
thread_local uintptr_t fault_address = 0;
struct sigaction previous_handler;

void OnBusError(int signal, siginfo_t* info, void* context) {
  if (sigjmp_buf* guard = active_guard) {
    active_guard = nullptr;
    fault_address = reinterpret_cast<uintptr_t>(info->si_addr);
    siglongjmp(*guard, 1);
  }
  // Not inside a guard: whatever handled SIGBUS before decides.
  if (previous_handler.sa_flags & SA_SIGINFO) {
    previous_handler.sa_sigaction(signal, info, context);
    return;
  }
  if (previous_handler.sa_handler == SIG_IGN) return;
  if (previous_handler.sa_handler != SIG_DFL) {
    previous_handler.sa_handler(signal);
    return;
  }
  // The default: returning re-runs the faulting access, which now ends the process.
  struct sigaction default_action = {};
  default_action.sa_handler = SIG_DFL;
  sigemptyset(&default_action.sa_mask);
  sigaction(SIGBUS, &default_action, nullptr);
}

void InstallHandler() {
  struct sigaction action = {};
  action.sa_sigaction = OnBusError;
  // SA_NODEFER: SIGBUS stays unblocked after the jump, so the guard need not save the mask
  // (no system call per access).
  action.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  sigaction(SIGBUS, &action, &previous_handler);
}

}  // namespace

absl::Status GuardMemoryAccess(absl::string_view what, absl::FunctionRef<void()> access) {
  static std::once_flag installed;
  std::call_once(installed, InstallHandler);
  sigjmp_buf guard;
  sigjmp_buf* const outer = active_guard;
  if (sigsetjmp(guard, 0) != 0) {
    active_guard = outer;
    return absl::DataLossError(absl::StrCat(
        what, ": the memory at 0x", absl::Hex(fault_address),
        " is gone (SIGBUS): its shared-memory segment was truncated while refitd used it"));
  }
  active_guard = &guard;
  access();
  active_guard = outer;
  return absl::OkStatus();
}

}  // namespace refit::transport

// A one-way signal with a reason: raised by one thread (the coordinator's abort of an
// epoch, a lost control session, a daemon stopping), seen by the threads it stops at their
// next check (`raised()`, one atomic load, cheap enough for a copy loop) and at once by a
// thread asleep in `SleepFor` or by a listener (the UCX worker's wakeup, which ends its
// sleep on the worker's event descriptor). Cleared when the next run begins.
//
// Thread-safe: every method may be called from any thread. Listeners run on the raising
// thread, under the interrupt's lock: they must be quick and must not touch the interrupt.
#ifndef REFIT_TRANSPORT_INTERRUPT_H_
#define REFIT_TRANSPORT_INTERRUPT_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "absl/time/time.h"

namespace refit::transport {

class Interrupt {
 public:
  Interrupt();
  Interrupt(const Interrupt&) = delete;
  Interrupt& operator=(const Interrupt&) = delete;

  // Raises it. The first reason since the last Clear stays; later ones are dropped. Wakes
  // every SleepFor and runs every listener.
  void Raise(std::string_view reason);
  // Lowers it, for the next run.
  void Clear();

  bool raised() const { return raised_.load(std::memory_order_acquire); }
  // Why it was raised ("" while it is not).
  std::string reason() const;

  // Sleeps for `duration` on the monotonic clock (a step of the wall clock neither cuts it
  // short nor stretches it), or until raised. Returns whether it is raised.
  bool SleepFor(absl::Duration duration) const;

  // While the returned handle lives, `wake` runs at every Raise. The handle may outlive the
  // interrupt (it then does nothing).
  class Listening {
   public:
    Listening() = default;
    Listening(Listening&& other) noexcept = default;
    Listening& operator=(Listening&& other) noexcept;
    ~Listening();

   private:
    friend class Interrupt;
    struct Listeners;
    Listening(std::weak_ptr<Listeners> listeners, int64_t id)
        : listeners_(std::move(listeners)), id_(id) {}
    void Stop();
    std::weak_ptr<Listeners> listeners_;
    int64_t id_ = 0;
  };
  [[nodiscard]] Listening Listen(std::function<void()> wake) const;

 private:
  std::atomic<bool> raised_{false};
  mutable std::mutex mu_;
  mutable std::condition_variable raise_signal_;  // notified at every Raise
  std::string reason_;                            // guarded by mu_
  // Shared with the Listening handles, so one that outlives the interrupt is harmless.
  const std::shared_ptr<Listening::Listeners> listeners_;
};

}  // namespace refit::transport

#endif  // REFIT_TRANSPORT_INTERRUPT_H_

#include "transport/interrupt.h"

#include <chrono>
#include <utility>

namespace refit::transport {

struct Interrupt::Listening::Listeners {
  std::mutex mu;
  std::map<int64_t, std::function<void()>> wakes;  // guarded by mu
  int64_t next = 0;                                // guarded by mu
};

Interrupt::Interrupt() : listeners_(std::make_shared<Listening::Listeners>()) {}

void Interrupt::Raise(std::string_view reason) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!raised_.load(std::memory_order_relaxed)) reason_ = std::string(reason);
  raised_.store(true, std::memory_order_release);
  raise_signal_.notify_all();
  std::lock_guard<std::mutex> listening(listeners_->mu);
  for (auto& [id, wake] : listeners_->wakes) wake();
}

void Interrupt::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  raised_.store(false, std::memory_order_release);
  reason_.clear();
}

std::string Interrupt::reason() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reason_;
}

bool Interrupt::SleepFor(absl::Duration duration) const {
  std::unique_lock<std::mutex> lock(mu_);
  if (duration <= absl::ZeroDuration()) return raised();
  // steady_clock: libstdc++ waits with CLOCK_MONOTONIC (pthread_cond_clockwait).
  const auto until = std::chrono::steady_clock::now() +
                     (duration == absl::InfiniteDuration()
                          ? std::chrono::hours(24 * 365)
                          : std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                absl::ToChronoNanoseconds(duration)));
  raise_signal_.wait_until(lock, until, [this]() { return raised(); });
  return raised();
}

Interrupt::Listening Interrupt::Listen(std::function<void()> wake) const {
  std::lock_guard<std::mutex> lock(listeners_->mu);
  const int64_t id = listeners_->next++;
  listeners_->wakes.emplace(id, std::move(wake));
  return Listening(listeners_, id);
}

void Interrupt::Listening::Stop() {
  if (std::shared_ptr<Listeners> listeners = listeners_.lock()) {
    std::lock_guard<std::mutex> lock(listeners->mu);
    listeners->wakes.erase(id_);
  }
  listeners_.reset();
}

Interrupt::Listening& Interrupt::Listening::operator=(Listening&& other) noexcept {
  if (this != &other) {
    Stop();
    listeners_ = std::move(other.listeners_);
    id_ = other.id_;
  }
  return *this;
}

Interrupt::Listening::~Listening() { Stop(); }

}  // namespace refit::transport

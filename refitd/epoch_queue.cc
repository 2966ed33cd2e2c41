#include "refitd/epoch_queue.h"

#include <utility>

namespace refit::daemon {

EpochQueue::EpochQueue(transport::Interrupt* interrupt, Prepare prepare, Run run)
    : interrupt_(interrupt),
      prepare_(std::move(prepare)),
      run_(std::move(run)),
      thread_(&EpochQueue::Loop, this) {}

EpochQueue::~EpochQueue() {
  {
    absl::MutexLock lock(&mu_);
    exit_ = true;
  }
  thread_.join();
}

void EpochQueue::Submit(Job job) {
  absl::MutexLock lock(&mu_);
  queued_ = std::move(job);
}

void EpochQueue::Finish(std::string_view reason) {
  absl::MutexLock lock(&mu_);
  if (IdleLocked()) return;
  interrupt_->Raise(reason);
  auto idle = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return IdleLocked(); };
  mu_.Await(absl::Condition(&idle));
}

void EpochQueue::Nudge() {
  absl::MutexLock lock(&mu_);
  nudged_ = true;
}

bool EpochQueue::AwaitIdle(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return IdleLocked(); };
  return mu_.AwaitWithTimeout(absl::Condition(&idle), timeout);
}

void EpochQueue::Loop() {
  while (true) {
    const bool prepared = prepare_();
    Job job;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return queued_.has_value() || exit_ || nudged_;
      };
      if (!prepared) {  // try again in a moment
        mu_.AwaitWithTimeout(absl::Condition(&ready), absl::Milliseconds(500));
      } else {
        mu_.Await(absl::Condition(&ready));
      }
      if (!queued_.has_value()) {
        if (exit_) return;
        nudged_ = false;  // prepare again
        continue;
      }
      job = std::move(*queued_);
      queued_.reset();
      busy_ = true;
    }
    run_(job);
    absl::MutexLock lock(&mu_);
    busy_ = false;
  }
}

}  // namespace refit::daemon

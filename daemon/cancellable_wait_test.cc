#include "daemon/cancellable_wait.h"

#include <atomic>
#include <thread>

#include "gtest/gtest.h"

namespace refit::daemon {
namespace {

TEST(AwaitCancellableTest, ReturnsAsSoonAsTheConditionHolds) {
  absl::Mutex mu;
  bool ready = false;
  std::thread setter([&] {
    absl::SleepFor(absl::Milliseconds(50));
    absl::MutexLock lock(&mu);
    ready = true;
  });
  absl::MutexLock lock(&mu);
  const absl::Time start = absl::Now();
  EXPECT_TRUE(AwaitCancellable(mu, absl::Condition(&ready), absl::InfiniteFuture(), {}));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  mu.Unlock();
  setter.join();
  mu.Lock();
}

TEST(AwaitCancellableTest, GivesUpAtTheDeadline) {
  absl::Mutex mu;
  bool never = false;
  absl::MutexLock lock(&mu);
  const absl::Time start = absl::Now();
  EXPECT_FALSE(AwaitCancellable(mu, absl::Condition(&never), start + absl::Milliseconds(150), {}));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(150));
}

TEST(AwaitCancellableTest, GivesUpWhenTheCallerCancelsThoughTheDeadlineIsFarAway) {
  absl::Mutex mu;
  bool never = false;
  std::atomic<bool> cancelled = false;
  std::thread canceller([&] {
    absl::SleepFor(absl::Milliseconds(50));
    cancelled = true;
  });
  absl::MutexLock lock(&mu);
  const absl::Time start = absl::Now();
  EXPECT_FALSE(AwaitCancellable(mu, absl::Condition(&never), absl::InfiniteFuture(),
                                [&] { return cancelled.load(); }));
  // Noticed within a poll interval or so of the cancellation, not at the deadline.
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  canceller.join();
}

TEST(AwaitCancellableTest, AConditionThatAlreadyHoldsNeedsNoTime) {
  absl::Mutex mu;
  bool ready = true;
  absl::MutexLock lock(&mu);
  EXPECT_TRUE(
      AwaitCancellable(mu, absl::Condition(&ready), absl::InfinitePast(), [] { return true; }));
}

}  // namespace
}  // namespace refit::daemon

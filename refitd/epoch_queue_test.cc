#include "refitd/epoch_queue.h"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace refit::daemon {
namespace {

EpochQueue::Job JobFor(const std::string& epoch) {
  EpochQueue::Job job;
  job.execute.set_epoch_id(epoch);
  return job;
}

// What the queue ran, in order, and on which thread.
struct Ran {
  absl::Mutex mu;
  std::vector<std::string> epochs ABSL_GUARDED_BY(mu);
  std::vector<bool> interrupted ABSL_GUARDED_BY(mu);
  std::thread::id thread ABSL_GUARDED_BY(mu);

  void Add(const EpochQueue::Job& job, bool was_interrupted) {
    absl::MutexLock lock(&mu);
    epochs.push_back(job.execute.epoch_id());
    interrupted.push_back(was_interrupted);
    thread = std::this_thread::get_id();
  }
  // Waits (bounded) until `n` epochs ran.
  bool AwaitCount(size_t n) {
    absl::MutexLock lock(&mu);
    auto enough = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu) { return epochs.size() >= n; };
    return mu.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(20));
  }
};

TEST(EpochQueueTest, EpochsRunOneAtATimeInOrderOnTheQueuesThread) {
  transport::Interrupt interrupt;
  Ran ran;
  std::atomic<int> running{0};
  std::atomic<bool> overlapped{false};
  EpochQueue queue(
      &interrupt, [] { return true; },
      [&](const EpochQueue::Job& job) {
        if (running.fetch_add(1) != 0) overlapped = true;
        absl::SleepFor(absl::Milliseconds(5));
        ran.Add(job, interrupt.raised());
        running.fetch_sub(1);
      });
  // With nothing running, Finish neither waits nor interrupts.
  queue.Finish("nothing to finish");
  EXPECT_FALSE(interrupt.raised());
  for (int i = 0; i < 5; ++i) {
    queue.Submit(JobFor("epoch-" + std::to_string(i)));
    queue.Finish("the next epoch began");  // as the control stream does before each epoch
    interrupt.Clear();
  }
  ASSERT_TRUE(ran.AwaitCount(5));
  EXPECT_FALSE(overlapped);
  absl::MutexLock lock(&ran.mu);
  EXPECT_EQ(ran.epochs,
            (std::vector<std::string>{"epoch-0", "epoch-1", "epoch-2", "epoch-3", "epoch-4"}));
  EXPECT_NE(ran.thread, std::this_thread::get_id());
}

TEST(EpochQueueTest, FinishInterruptsTheRunningEpochAndWaitsUntilItReturned) {
  transport::Interrupt interrupt;
  std::atomic<bool> started{false};
  std::atomic<bool> returned{false};
  EpochQueue queue(
      &interrupt, [] { return true; },
      [&](const EpochQueue::Job&) {
        started = true;
        interrupt.SleepFor(absl::Seconds(30));
        returned = true;
      });
  queue.Submit(JobFor("long"));
  while (!started) absl::SleepFor(absl::Milliseconds(1));
  queue.Finish("the coordinator aborted epoch long");
  EXPECT_TRUE(interrupt.raised());
  EXPECT_EQ(interrupt.reason(), "the coordinator aborted epoch long");
  EXPECT_TRUE(returned);  // Finish came back only after the epoch did
  EXPECT_TRUE(queue.AwaitIdle(absl::ZeroDuration()));
}

TEST(EpochQueueTest, EveryEpochSubmittedRunsEvenOneQueuedWhenStopping) {
  transport::Interrupt interrupt;
  Ran ran;
  {
    EpochQueue queue(
        &interrupt, [] { return true; },
        [&](const EpochQueue::Job& job) {
          // "first" runs until interrupted; the one queued at exit returns at once.
          if (job.execute.epoch_id() == "first") interrupt.SleepFor(absl::Seconds(30));
          ran.Add(job, interrupt.raised());
        });
    queue.Submit(JobFor("first"));
    EXPECT_FALSE(queue.AwaitIdle(absl::Milliseconds(10)));
    queue.Finish("refitd is stopping");
    interrupt.Clear();
    queue.Submit(JobFor("at-exit"));
  }  // the destructor runs it before joining
  absl::MutexLock lock(&ran.mu);
  EXPECT_EQ(ran.epochs, (std::vector<std::string>{"first", "at-exit"}));
  EXPECT_TRUE(ran.interrupted[0]);
}

TEST(EpochQueueTest, WhilePrepareFailsItIsRetriedAndEpochsStillRun) {
  transport::Interrupt interrupt;
  std::atomic<int> prepared{0};
  Ran ran;
  EpochQueue queue(
      &interrupt,
      [&] {
        ++prepared;
        return false;  // no data plane: the epoch runs anyway, and reports that
      },
      [&](const EpochQueue::Job& job) { ran.Add(job, interrupt.raised()); });
  queue.Submit(JobFor("without-data-plane"));
  ASSERT_TRUE(ran.AwaitCount(1));
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  while (prepared < 3 && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_GE(prepared, 3);
}

// Something new to prepare (same-host peers' ranks to map) has the thread prepare again
// without an epoch, on the queue's thread.
TEST(EpochQueueTest, ANudgePreparesAgainBetweenEpochs) {
  transport::Interrupt interrupt;
  absl::Mutex mu;
  int prepared = 0;
  EpochQueue queue(
      &interrupt,
      [&] {
        absl::MutexLock lock(&mu);
        ++prepared;
        return true;
      },
      [](const EpochQueue::Job&) {});
  auto at_least = [&](int n) {
    absl::MutexLock lock(&mu);
    auto enough = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu) { return prepared >= n; };
    return mu.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(20));
  };
  ASSERT_TRUE(at_least(1));
  int before = 0;
  {
    absl::MutexLock lock(&mu);
    before = prepared;
  }
  queue.Nudge();
  EXPECT_TRUE(at_least(before + 1));
}

}  // namespace
}  // namespace refit::daemon

#include "transport/interrupt.h"

#include <atomic>
#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace refit::transport {
namespace {

TEST(InterruptTest, KeepsTheFirstReasonUntilCleared) {
  Interrupt interrupt;
  EXPECT_FALSE(interrupt.raised());
  EXPECT_EQ(interrupt.reason(), "");
  interrupt.Raise("the coordinator aborted epoch e-1");
  interrupt.Raise("refitd is stopping");
  EXPECT_TRUE(interrupt.raised());
  EXPECT_EQ(interrupt.reason(), "the coordinator aborted epoch e-1");
  interrupt.Clear();
  EXPECT_FALSE(interrupt.raised());
  EXPECT_EQ(interrupt.reason(), "");
  interrupt.Raise("refitd is stopping");
  EXPECT_EQ(interrupt.reason(), "refitd is stopping");
}

TEST(InterruptTest, ASleepEndsAtTheRaiseNotAtItsEnd) {
  Interrupt interrupt;
  const absl::Time start = absl::Now();
  std::thread raiser([&]() {
    absl::SleepFor(absl::Milliseconds(50));
    interrupt.Raise("stop");
  });
  EXPECT_TRUE(interrupt.SleepFor(absl::Seconds(60)));
  raiser.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
}

TEST(InterruptTest, ASleepWithoutARaiseLastsItsDuration) {
  Interrupt interrupt;
  const absl::Time start = absl::Now();
  EXPECT_FALSE(interrupt.SleepFor(absl::Milliseconds(30)));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(30));
  interrupt.Raise("stop");
  EXPECT_TRUE(interrupt.SleepFor(absl::Seconds(60)));  // already raised: at once
  EXPECT_TRUE(interrupt.SleepFor(absl::ZeroDuration()));
}

TEST(InterruptTest, ListenersRunAtEveryRaiseWhileTheyAreHeld) {
  Interrupt interrupt;
  int woken = 0;
  {
    Interrupt::Listening listening = interrupt.Listen([&]() { ++woken; });
    interrupt.Raise("one");
    EXPECT_EQ(woken, 1);
    Interrupt::Listening moved = std::move(listening);
    interrupt.Raise("two");
    EXPECT_EQ(woken, 2);
  }
  interrupt.Raise("three");
  EXPECT_EQ(woken, 2);
}

TEST(InterruptTest, AListeningHandleMayOutliveItsInterrupt) {
  int woken = 0;
  Interrupt::Listening listening;
  {
    Interrupt interrupt;
    listening = interrupt.Listen([&]() { ++woken; });
    interrupt.Raise("once");
  }
  EXPECT_EQ(woken, 1);
  listening = Interrupt::Listening();  // stops listening to nothing: no effect, no crash
}

}  // namespace
}  // namespace refit::transport

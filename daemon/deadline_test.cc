#include "daemon/deadline.h"

#include "gtest/gtest.h"

namespace refit::daemon {
namespace {

TEST(DeadlineTest, CountsDownOnTheMonotonicClock) {
  const Deadline deadline = Deadline::In(absl::Seconds(30));
  EXPECT_FALSE(deadline.Passed());
  EXPECT_GT(deadline.Left(), absl::Seconds(29));
  EXPECT_LE(deadline.Left(), absl::Seconds(30));
  // As a wall-clock time it is that much from now, however the wall clock stands.
  const absl::Duration as_time = deadline.ToTime() - absl::Now();
  EXPECT_GT(as_time, absl::Seconds(29));
  EXPECT_LE(as_time, absl::Seconds(30));
  EXPECT_TRUE(Deadline::In(-absl::Milliseconds(1)).Passed());
  EXPECT_TRUE(Deadline::In(absl::ZeroDuration()).Passed());
}

TEST(DeadlineTest, WithinTakesTheEarlierAndNeverIsNever) {
  const Deadline far = Deadline::In(absl::Hours(1));
  EXPECT_LE(far.Within(absl::Seconds(1)).Left(), absl::Seconds(1));
  EXPECT_GT(Deadline::In(absl::Seconds(1)).Within(absl::Hours(1)).Left(), absl::ZeroDuration());
  EXPECT_LE(Deadline::In(absl::Seconds(1)).Within(absl::Hours(1)).Left(), absl::Seconds(1));
  const Deadline never = Deadline::Never();
  EXPECT_FALSE(never.Passed());
  EXPECT_EQ(never.Left(), absl::InfiniteDuration());
  EXPECT_EQ(never.ToTime(), absl::InfiniteFuture());
  EXPECT_LE(never.Within(absl::Seconds(2)).Left(), absl::Seconds(2));
}

}  // namespace
}  // namespace refit::daemon

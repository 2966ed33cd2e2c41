// Winding down an aborted epoch: the next epoch waits only for daemons told to run it that
// have not reported on it and are still in the session they ran it in.
#include "coordinator/winding_down.h"

#include "gtest/gtest.h"

namespace refit::daemon {
namespace {

class NoChannel : public DaemonChannel {
 public:
  bool Send(const v1::CoordinatorMessage&) override { return true; }
};

TEST(WindingDownTest, TheNextEpochWaitsForDaemonsStillRunningTheAbortedOne) {
  const WindingDown::Sessions sessions = {{0, std::make_shared<NoChannel>()},
                                          {1, std::make_shared<NoChannel>()},
                                          {2, std::make_shared<NoChannel>()}};
  WindingDown winding;
  EXPECT_TRUE(winding.Over(sessions));
  // Daemon 2 had reported before the abort; 0 and 1 had not.
  winding.Start("job-4", {0, 1}, sessions);
  EXPECT_EQ(winding.epoch_id(), "job-4");
  EXPECT_EQ(winding.size(), 2u);
  EXPECT_FALSE(winding.Over(sessions));
  winding.OnDone(0, "job-3");  // a report of another epoch
  EXPECT_EQ(winding.size(), 2u);
  winding.OnDone(0, "job-4");
  EXPECT_FALSE(winding.Over(sessions));
  winding.OnDaemonLost(1);
  EXPECT_TRUE(winding.Over(sessions));
}

TEST(WindingDownTest, ADaemonInANewSessionOrNotInTheNextEpochIsNotWaitedFor) {
  WindingDown::Sessions sessions = {{0, std::make_shared<NoChannel>()},
                                    {1, std::make_shared<NoChannel>()}};
  WindingDown winding;
  winding.Start("job-7", {0, 1}, sessions);
  sessions[0] = std::make_shared<NoChannel>();  // refitd on daemon 0 restarted
  EXPECT_FALSE(winding.Over(sessions));         // daemon 1 still winds down
  sessions.erase(1);                            // the next epoch runs without daemon 1
  EXPECT_TRUE(winding.Over(sessions));
  winding.Clear();
  EXPECT_EQ(winding.size(), 0u);
}

}  // namespace
}  // namespace refit::daemon

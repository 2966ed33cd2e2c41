// What refit's daemons refuse to start with: job files whose fields are out of range, a
// coordinator without a token that was not told --insecure, and a second refitd on a live
// socket. Each exits at once with the field or the reason named.
#include <sys/stat.h>

#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/adversarial/processes.h"

namespace refit::testing {
namespace {

using ::testing::HasSubstr;

class StartupTest : public ::testing::Test {
 protected:
  void SetUp() override { folder_ = ScratchFolder("refit-startup"); }

  // Starts a coordinator on `job` (JSON text) with `flags`; its exit code within 10 s.
  int CoordinatorExit(const std::string& job, const std::string& flag, std::string* log) {
    const std::string path = absl::StrCat(folder_, "/job-", ++jobs_, ".json");
    std::ofstream(path) << job;
    ChildProcess coordinator({RunfilesPath("coordinator/refit-coordinator"), "--listen=127.0.0.1:0",
                              "--job=" + path, flag},
                             path + ".log");
    const int code = coordinator.AwaitExit(absl::Seconds(10));
    *log = coordinator.Log();
    return code;
  }

  void ExpectJobRefused(const std::string& fields, const std::string& fragment) {
    std::string log;
    const std::string job = absl::StrCat(R"({"name": "bad", "sourceRanks": 4, "destinationRanks": 4)",
                                         fields.empty() ? "" : ", ", fields, "}");
    EXPECT_EQ(CoordinatorExit(job, "--insecure", &log), 2) << job << "\n" << log;
    EXPECT_THAT(log, HasSubstr(fragment)) << job;
  }

  std::string folder_;
  int jobs_ = 0;
};

TEST_F(StartupTest, AJobWithNegativeRankCountsIsRefused) {
  ExpectJobRefused(R"("sourceRanks": -4)", "job: sourceRanks -4 is not a rank count");
}

TEST_F(StartupTest, AJobWhoseLeaseCouldNeverHoldIsRefused) {
  ExpectJobRefused(R"("leaseMs": 1)", "job: leaseMs 1 is outside 200 to 600000 ms");
}

TEST_F(StartupTest, AJobWithAnUnknownStrategyIsRefused) {
  ExpectJobRefused(R"("strategy": "broadcast_all")",
                   "job: strategy \"broadcast_all\" is not reshard, gather_broadcast or auto");
}

TEST_F(StartupTest, AJobWithANegativeBandwidthIsRefused) {
  ExpectJobRefused(R"("topology": {"nicGbytesPerS": -50})", "job: topology.nicGbytesPerS -50");
}

TEST_F(StartupTest, AJobNameWithANewlineIsRefused) {
  ExpectJobRefused(R"("name": "bad\n[info] forged")", "job: name");
}

TEST_F(StartupTest, AJobWhoseCountsConflictWithItsModelIsRefused) {
  std::string log;
  const std::string job =
      R"({"name": "mini", "model": "dsv3-mini", "sourceParallel": "pp=2,ep=2",
          "destinationParallel": "tp=2,dp=2", "destinationRanks": 3})";
  EXPECT_EQ(CoordinatorExit(job, "--insecure", &log), 2) << log;
  EXPECT_THAT(log, HasSubstr("job: destinationRanks 3 conflicts with model dsv3-mini"));
}

TEST_F(StartupTest, ACoordinatorWithoutATokenMustBeToldInsecure) {
  std::string log;
  const std::string job = R"({"name": "open", "sourceRanks": 1, "destinationRanks": 1})";
  EXPECT_EQ(CoordinatorExit(job, "--metrics_port=-1", &log), 2) << log;
  EXPECT_THAT(log, HasSubstr("no --token_file"));
  EXPECT_THAT(log, HasSubstr("--insecure"));
}

TEST_F(StartupTest, ASecondRefitdOnALiveSocketRefusesNamingThePid) {
  const std::string socket = folder_ + "/refitd.sock";
  ChildProcess first({RunfilesPath("refitd/refitd"), "--coordinator=127.0.0.1:1", "--node=a",
                      "--socket=" + socket},
                     folder_ + "/first.log");
  ASSERT_FALSE(first.AwaitLine("incarnation=", absl::Seconds(20)).empty()) << first.Log();
  ChildProcess second({RunfilesPath("refitd/refitd"), "--coordinator=127.0.0.1:1", "--node=b",
                       "--socket=" + socket},
                      folder_ + "/second.log");
  EXPECT_EQ(second.AwaitExit(absl::Seconds(10)), 1) << second.Log();
  EXPECT_THAT(second.Log(), HasSubstr(absl::StrCat("another refitd (pid ", first.pid())));
  EXPECT_TRUE(first.Alive());
  struct stat info;
  EXPECT_EQ(stat(socket.c_str(), &info), 0) << "the first refitd's socket was removed";
}

}  // namespace
}  // namespace refit::testing

#include "coordinator/in_doubt_resolution.h"

#include "gtest/gtest.h"

namespace refit::daemon {
namespace {

v1::InDoubtEpoch Epoch(const std::string& id, std::vector<std::string> nodes) {
  v1::InDoubtEpoch epoch;
  epoch.set_epoch_id(id);
  epoch.set_version(4);
  for (const std::string& node : nodes) epoch.add_destination_nodes(node);
  return epoch;
}

TEST(InDoubtResolutionTest, TheCoordinatorsOwnDecisionStands) {
  const v1::InDoubtEpoch epoch = Epoch("job-7", {"a", "b"});
  EXPECT_EQ(ResolveInDoubt(epoch, true, {}).outcome, InDoubtResolution::kCommit);
  // Even against a node that claims the commit: this coordinator aborted it.
  EXPECT_EQ(ResolveInDoubt(epoch, false, {{"a", "job-7"}}).outcome, InDoubtResolution::kAbort);
}

TEST(InDoubtResolutionTest, OneNodeThatCommittedCommitsItForAll) {
  const InDoubtResolution resolution =
      ResolveInDoubt(Epoch("job-7", {"a", "b", "c"}), std::nullopt, {{"b", "job-7"}});
  EXPECT_EQ(resolution.outcome, InDoubtResolution::kCommit);
  EXPECT_EQ(resolution.why, "refitd on b committed it");
}

TEST(InDoubtResolutionTest, ItStaysUndecidedWhileADestinationNodeIsUnheard) {
  const InDoubtResolution resolution = ResolveInDoubt(Epoch("job-7", {"a", "b", "c"}), std::nullopt,
                                                      {{"a", ""}, {"trainer", "job-6"}});
  EXPECT_EQ(resolution.outcome, InDoubtResolution::kUndecided);
  EXPECT_EQ(resolution.why, "waiting for refitd on b, c to say whether it committed it");
}

TEST(InDoubtResolutionTest, ItIsAbortedOnceEveryDestinationNodeSaysItDidNotCommit) {
  // An older commit is not this epoch's.
  const InDoubtResolution resolution = ResolveInDoubt(Epoch("job-7", {"a", "b"}), std::nullopt,
                                                      {{"a", "job-6"}, {"b", ""}, {"c", "job-5"}});
  EXPECT_EQ(resolution.outcome, InDoubtResolution::kAbort);
  EXPECT_NE(resolution.why.find("none of its destination nodes (a, b) committed it"),
            std::string::npos)
      << resolution.why;
}

}  // namespace
}  // namespace refit::daemon

// The checkers catch broken plans: each mutation of a correct plan must be rejected by
// both the byte checker and the coverage checker, with a message naming the tensor.
#include <functional>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "planner/check/byte_checker.h"
#include "planner/check/coverage_checker.h"
#include "planner/check/region_math.h"
#include "planner/layout.h"
#include "planner/planner.h"
#include "planner/testing/layout_builder.h"
#include "planner/testing/relay_buffer_case.h"
#include "planner/topology.h"

namespace refit::check {
namespace {

using planner::Layout;
using planner::Plan;
using refit::testing::LayoutBuilder;

class CheckersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LayoutBuilder src, dst;
    src.Tensor("w", {12, 8}, "BF16").Chunked("w", 0, {0, 1, 2});
    src.Tensor("norm", {8}).Replicated("norm", {0, 1, 2});
    for (int r = 0; r < 4; ++r) dst.Rank(r, "infer", r);
    dst.Tensor("w", {12, 8}, "BF16").Chunked("w", 1, {0, 1, 2, 3});
    dst.Tensor("norm", {8}).Replicated("norm", {0, 1, 2, 3});
    for (int r = 0; r < 3; ++r) src.Rank(r, "trainer-" + std::to_string(r), 0);
    sources_ = *planner::CompileLayout(src.spec(), "source");
    destinations_ = *planner::CompileLayout(dst.spec(), "destination");
    plan_ = **planner::BuildPlan(sources_, destinations_, planner::DgxH100Topology(),
                                 planner::PlanOptions());
  }

  void ExpectBothReject(const std::function<void(Plan*)>& mutate, const std::string& what) {
    Plan broken = plan_;
    mutate(&broken);
    const absl::Status bytes = CheckBytes(sources_, destinations_, broken, 1 << 20);
    const absl::Status coverage = CheckCoverage(sources_, destinations_, broken);
    EXPECT_FALSE(bytes.ok()) << what;
    EXPECT_FALSE(coverage.ok()) << what;
    EXPECT_EQ(coverage.code(), absl::StatusCode::kFailedPrecondition) << coverage;
    EXPECT_TRUE(absl::StrContains(std::string(coverage.message()), "w") ||
                absl::StrContains(std::string(coverage.message()), "norm"))
        << coverage;
  }

  Layout sources_, destinations_;
  Plan plan_;
};

TEST_F(CheckersTest, AcceptTheCorrectPlan) {
  EXPECT_TRUE(CheckBytes(sources_, destinations_, plan_, 1 << 20).ok());
  EXPECT_TRUE(CheckCoverage(sources_, destinations_, plan_).ok());
}

TEST_F(CheckersTest, RejectADroppedTransfer) {
  ExpectBothReject([](Plan* p) { p->transfers.erase(p->transfers.begin()); }, "dropped");
}

TEST_F(CheckersTest, RejectATransferDoneTwiceOverlapping) {
  // Widen one piece into its neighbour's box on the destination: written twice, and its
  // source view no longer holds the box.
  ExpectBothReject(
      [](Plan* p) {
        for (planner::Piece& piece : p->pieces) {
          if (piece.box.rank() == 2 && piece.box.extent[0] > 1) {
            piece.box.offset[0] += 1;
            return;
          }
        }
      },
      "shifted");
}

TEST_F(CheckersTest, RejectAForwardBeforeItsArrival) {
  Plan broken = plan_;
  bool moved = false;
  for (planner::Transfer& t : broken.transfers) {
    if (t.src.kind == planner::EndpointKind::kDestinationView) {
      t.batch = 0;
      moved = true;
    }
  }
  ASSERT_TRUE(moved) << "the plan forwards nothing";
  // Reorder so batch order holds, with the forwards first.
  std::stable_sort(
      broken.transfers.begin(), broken.transfers.end(),
      [](const planner::Transfer& a, const planner::Transfer& b) { return a.batch < b.batch; });
  std::stable_partition(broken.transfers.begin(), broken.transfers.end(),
                        [](const planner::Transfer& t) {
                          return t.src.kind == planner::EndpointKind::kDestinationView;
                        });
  for (planner::Transfer& t : broken.transfers) t.batch = 0;
  const absl::Status coverage = CheckCoverage(sources_, destinations_, broken);
  EXPECT_FALSE(coverage.ok());
  EXPECT_TRUE(absl::StrContains(std::string(coverage.message()), "before the data arrived"))
      << coverage;
  EXPECT_FALSE(CheckBytes(sources_, destinations_, broken, 1 << 20).ok());
}

TEST_F(CheckersTest, RejectAWriteToTheWrongView) {
  ExpectBothReject(
      [](Plan* p) {
        for (planner::Transfer& t : p->transfers) {
          if (t.dst.kind == planner::EndpointKind::kDestinationView) {
            t.dst.index = (t.dst.index + 1) % 8;
            return;
          }
        }
      },
      "wrong view");
}

TEST_F(CheckersTest, RejectAPieceWhoseBytesDisagreeWithItsBox) {
  // Transfers take their byte counts from their pieces: a wrong count would misprice the
  // plan and mis-size every message that carries the piece.
  Plan broken = plan_;
  ASSERT_FALSE(broken.pieces.empty());
  broken.pieces[broken.transfers[0].piece].bytes += 2;
  const absl::Status coverage = CheckCoverage(sources_, destinations_, broken);
  EXPECT_EQ(coverage.code(), absl::StatusCode::kFailedPrecondition) << coverage;
  EXPECT_TRUE(absl::StrContains(std::string(coverage.message()), "byte count does not match"))
      << coverage;
}

TEST_F(CheckersTest, ByteCheckerRefusesLayoutsTooLargeForMemory) {
  const absl::Status status = CheckBytes(sources_, destinations_, plan_, 16);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(std::string(status.message()), "--verify=coverage"));
}

class RelayBufferCheckersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const refit::testing::RelayBufferCase relay_case = refit::testing::MakeRelayBufferCase();
    sources_ = *planner::CompileLayout(relay_case.sources.spec(), "source");
    destinations_ = *planner::CompileLayout(relay_case.destinations.spec(), "destination");
    planner::PlanOptions options;
    options.staging_budget_bytes = relay_case.staging_budget_bytes;
    plan_ = **planner::BuildPlan(sources_, destinations_, relay_case.topology, options);
  }
  static bool ReadsABuffer(const planner::Transfer& t) {
    return t.src.kind == planner::EndpointKind::kRelayBuffer;
  }

  Layout sources_, destinations_;
  Plan plan_;
};

TEST_F(RelayBufferCheckersTest, AcceptTheCorrectPlan) {
  ASSERT_GT(plan_.stats.relay_buffer_bytes, 0);
  EXPECT_TRUE(CheckBytes(sources_, destinations_, plan_, 1 << 26).ok());
  EXPECT_TRUE(CheckCoverage(sources_, destinations_, plan_).ok());
}

TEST_F(RelayBufferCheckersTest, RejectAReadBeforeTheBufferIsFilled) {
  // Every read of a buffer moved to batch 0 and listed first: it runs before its fill.
  Plan broken = plan_;
  for (planner::Transfer& t : broken.transfers) {
    if (ReadsABuffer(t)) t.batch = 0;
  }
  std::stable_partition(broken.transfers.begin(), broken.transfers.end(), ReadsABuffer);
  const absl::Status coverage = CheckCoverage(sources_, destinations_, broken);
  EXPECT_FALSE(coverage.ok());
  EXPECT_TRUE(absl::StrContains(std::string(coverage.message()), "before it is filled"))
      << coverage;
  EXPECT_FALSE(CheckBytes(sources_, destinations_, broken, 1 << 26).ok());
}

TEST_F(RelayBufferCheckersTest, RejectAReadOfABufferThatHoldsAnotherBox) {
  Plan broken = plan_;
  for (planner::Transfer& t : broken.transfers) {
    if (!ReadsABuffer(t)) continue;
    t.src.index = t.src.index == 0 ? 1 : 0;  // another piece of w, or of v
    break;
  }
  const absl::Status coverage = CheckCoverage(sources_, destinations_, broken);
  EXPECT_EQ(coverage.code(), absl::StatusCode::kFailedPrecondition) << coverage;
  EXPECT_TRUE(absl::StrContains(std::string(coverage.message()), "does not hold it")) << coverage;
  EXPECT_FALSE(CheckBytes(sources_, destinations_, broken, 1 << 26).ok());
}

TEST(RegionMathTest, CoverageByUnion) {
  const Region r{{0, 0}, {4, 4}};
  EXPECT_TRUE(IsCoveredBy(r, {Region{{0, 0}, {2, 4}}, Region{{2, 0}, {4, 4}}}));
  EXPECT_FALSE(IsCoveredBy(r, {Region{{0, 0}, {2, 4}}, Region{{2, 0}, {4, 3}}}));
  EXPECT_TRUE(AreDisjoint(Region{{0}, {2}}, Region{{2}, {3}}));
  EXPECT_EQ(Describe(r), "[0:4, 0:4]");
}

}  // namespace
}  // namespace refit::check

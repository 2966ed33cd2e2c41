#include "coordinator/replica_vetting.h"

#include <set>
#include <string>

#include "coordinator/testing/replica_policy.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/testing/layout_builder.h"

namespace refit::daemon {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using testing::ReplicaPolicyOf;

using Declarations = std::map<int64_t, std::shared_ptr<const v1::RankRegistration>>;

// Each rank of `spec` registered, declaring every tensor it holds a view of.
void Declare(const v1::LayoutSpec& spec, Declarations* declarations) {
  for (const v1::RankLayout& rank : spec.ranks()) {
    auto registration = std::make_shared<v1::RankRegistration>();
    registration->set_role(v1::ROLE_DESTINATION);
    *registration->mutable_layout() = rank;
    std::set<std::string> held;
    for (const v1::ShardView& view : rank.views()) held.insert(view.tensor());
    for (const v1::TensorSpec& t : spec.tensors()) {
      if (held.count(t.name())) *registration->add_tensors() = t;
    }
    (*declarations)[rank.rank()] = std::move(registration);
  }
}

// Replica r of TP2: ranks 2r and 2r + 1 hold the rows of w (shape `rows` x 4) and a norm.
void AddTp2Replica(int64_t replica, int64_t rows, const std::string& dtype,
                   Declarations* declarations, const std::string& w = "w") {
  refit::testing::LayoutBuilder layout;
  layout.Tensor(w, {rows, 4}, dtype).Tensor("norm", {4}, dtype);
  layout.Chunked(w, 0, {2 * replica, 2 * replica + 1});
  layout.Replicated("norm", {2 * replica, 2 * replica + 1});
  Declare(layout.spec(), declarations);
}

PlanAlone NeverPlanned() {
  return [](int64_t replica) {
    ADD_FAILURE() << "replica " << replica << " planned alone";
    return absl::OkStatus();
  };
}

TEST(ReplicaVettingTest, ReplicasDeclaringAlikeAllFitWithoutBeingPlannedAlone) {
  const DestinationReplicas replicas(ReplicaPolicyOf(2), 6);
  Declarations declarations;
  for (int64_t r : {0, 1, 2}) AddTp2Replica(r, 8, "BF16", &declarations);
  const ReplicaVetting vetting = VetReplicas(replicas, {0, 1, 2}, declarations, NeverPlanned());
  EXPECT_THAT(vetting.fit, ElementsAre(0, 1, 2));
  EXPECT_THAT(vetting.held, IsEmpty());
}

TEST(ReplicaVettingTest, AReplicaWhoseRanksDisagreeOnADtypeIsHeldNamingBothRanks) {
  const DestinationReplicas replicas(ReplicaPolicyOf(2), 4);
  Declarations declarations;
  AddTp2Replica(0, 8, "BF16", &declarations);
  AddTp2Replica(1, 8, "BF16", &declarations);
  // Rank 3 says F32 for the norm its peer rank 2 says is BF16.
  auto odd = std::make_shared<v1::RankRegistration>(*declarations[3]);
  for (v1::TensorSpec& t : *odd->mutable_tensors()) {
    if (t.name() == "norm") t.set_dtype("F32");
  }
  declarations[3] = odd;
  const ReplicaVetting vetting = VetReplicas(replicas, {0, 1}, declarations, NeverPlanned());
  EXPECT_THAT(vetting.fit, ElementsAre(0));
  ASSERT_EQ(vetting.held.count(1), 1u);
  EXPECT_EQ(vetting.held.at(1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(vetting.held.at(1).message(),
              HasSubstr("replica 1 (destination ranks 2-3): tensor norm: destination rank 3 "
                        "declares F32 [4] where destination rank 2 of the same replica declares "
                        "BF16 [4]"));
}

TEST(ReplicaVettingTest, AReplicaHoldingATensorInPartIsHeld) {
  const DestinationReplicas replicas(ReplicaPolicyOf(2), 4);
  Declarations declarations;
  AddTp2Replica(0, 8, "BF16", &declarations);
  // Replica 1 declares w [8, 4] but its ranks hold only the first half of the rows.
  refit::testing::LayoutBuilder half;
  half.Tensor("w", {8, 4}, "BF16").Tensor("norm", {4}, "BF16");
  half.View(2, "w", {0, 0}, {2, 4}).View(3, "w", {2, 0}, {2, 4});
  half.Replicated("norm", {2, 3});
  Declare(half.spec(), &declarations);
  const ReplicaVetting vetting =
      VetReplicas(replicas, {0, 1}, declarations, [](int64_t) { return absl::OkStatus(); });
  EXPECT_THAT(vetting.fit, ElementsAre(0));
  ASSERT_EQ(vetting.held.count(1), 1u);
  EXPECT_THAT(vetting.held.at(1).message(),
              HasSubstr("replica 1 (destination ranks 2-3) holds 16 of the 32 elements of "
                        "tensor w"));
}

TEST(ReplicaVettingTest, AReplicaTheSourcesCannotFillIsHeldWithThePlannersReason) {
  const DestinationReplicas replicas(ReplicaPolicyOf(2), 8);
  Declarations declarations;
  for (int64_t r : {0, 1, 3}) AddTp2Replica(r, 8, "BF16", &declarations);
  AddTp2Replica(2, 8, "BF16", &declarations, /*w=*/"w_typo");
  std::vector<int64_t> planned;
  const ReplicaVetting vetting =
      VetReplicas(replicas, {0, 1, 2, 3}, declarations, [&](int64_t replica) {
        planned.push_back(replica);
        return replica == 2 ? absl::InvalidArgumentError(
                                  "w_typo: the destinations declare this tensor but the "
                                  "sources do not")
                            : absl::OkStatus();
      });
  // One plan per kind of replica, not per replica.
  EXPECT_THAT(planned, ::testing::UnorderedElementsAre(0, 2));
  EXPECT_THAT(vetting.fit, ElementsAre(0, 1, 3));
  ASSERT_EQ(vetting.held.count(2), 1u);
  EXPECT_EQ(vetting.held.at(2).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(vetting.held.at(2).message(),
              HasSubstr("replica 2 (destination ranks 4-5) cannot be written from the sources: "
                        "w_typo: the destinations declare this tensor but the sources do not"));
}

TEST(ReplicaVettingTest, APlanThatFailsForWantOfSourcesHoldsNoReplica) {
  const DestinationReplicas replicas(ReplicaPolicyOf(2), 4);
  Declarations declarations;
  AddTp2Replica(0, 8, "BF16", &declarations);
  // Replica 1 splits w by columns: another kind of replica, of the same format.
  refit::testing::LayoutBuilder columns;
  columns.Tensor("w", {8, 4}, "BF16").Tensor("norm", {4}, "BF16");
  columns.Chunked("w", 1, {2, 3}).Replicated("norm", {2, 3});
  Declare(columns.spec(), &declarations);
  int plans = 0;
  const ReplicaVetting vetting = VetReplicas(replicas, {0, 1}, declarations, [&](int64_t) {
    ++plans;
    return absl::FailedPreconditionError("the refit group is incomplete");
  });
  // The refit says what is missing; the replicas are not to blame.
  EXPECT_EQ(plans, 2);
  EXPECT_THAT(vetting.fit, ElementsAre(0, 1));
  EXPECT_THAT(vetting.held, IsEmpty());
}

TEST(ReplicaVettingTest, OfTwoValidFormatsTheOneMostReplicasDeclareIsWritten) {
  const DestinationReplicas replicas(ReplicaPolicyOf(2), 6);
  Declarations declarations;
  AddTp2Replica(0, 8, "F8_E4M3", &declarations);
  AddTp2Replica(1, 8, "BF16", &declarations);
  AddTp2Replica(2, 8, "BF16", &declarations);
  const ReplicaVetting vetting =
      VetReplicas(replicas, {0, 1, 2}, declarations, [](int64_t) { return absl::OkStatus(); });
  EXPECT_THAT(vetting.fit, ElementsAre(1, 2));
  ASSERT_EQ(vetting.held.count(0), 1u);
  EXPECT_EQ(vetting.held.at(0).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(vetting.held.at(0).message(),
              HasSubstr("replica 0 (destination ranks 0-1) declares its tensors otherwise than "
                        "replicas 1, 2, whose format the group writes (tensor norm is BF16 [4] "
                        "there and F8_E4M3 [4] here)"));
}

TEST(ReplicaVettingTest, OnATieTheLowestReplicasFormatIsWritten) {
  const DestinationReplicas replicas(ReplicaPolicyOf(2), 4);
  Declarations declarations;
  AddTp2Replica(0, 8, "BF16", &declarations);
  AddTp2Replica(1, 8, "F8_E4M3", &declarations);
  const ReplicaVetting vetting =
      VetReplicas(replicas, {0, 1}, declarations, [](int64_t) { return absl::OkStatus(); });
  EXPECT_THAT(vetting.fit, ElementsAre(0));
  EXPECT_EQ(vetting.held.count(1), 1u);
}

}  // namespace
}  // namespace refit::daemon

// Plan slices: the key that decides whether a daemon gets its slice again changes with
// what a slice holds besides the daemon's transfers (a peer's address, a shared
// destination registered anew, the placement, the NCCL group); a slice carries only the
// daemon's own quantized and compared views; a slice is sent again to a new session, for a
// new key, or after a failed send.
#include "coordinator/plan_slices.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace refit::daemon {
namespace {

using ::testing::ElementsAre;

class NoChannel : public DaemonChannel {
 public:
  bool Send(const v1::CoordinatorMessage&) override { return true; }
};

// Source rank 0 on daemon 0, destination ranks 0 and 1 on daemon 1 (rank 1 written
// straight into), two daemons.
ClusterSnapshot TwoDaemons() {
  ClusterSnapshot snapshot;
  for (int32_t index = 0; index < 2; ++index) {
    v1::DaemonPeer& peer = snapshot.daemons.emplace_back();
    peer.set_index(index);
    peer.set_data_plane_address(absl::StrCat("ucx-", index));
  }
  auto place = [&](v1::Role role, int64_t rank, int32_t daemon) {
    v1::RankPlacement& p = snapshot.placement.emplace_back();
    p.set_role(role);
    p.set_rank(rank);
    p.set_daemon(daemon);
  };
  place(v1::ROLE_SOURCE, 0, 0);
  place(v1::ROLE_DESTINATION, 0, 1);
  place(v1::ROLE_DESTINATION, 1, 1);
  snapshot.destination_registrations = {{0, 5}, {1, 6}};
  snapshot.shared_destinations[1].set_rank(1);
  return snapshot;
}

v1::Plan PlanWithDigest(const std::string& digest) {
  v1::Plan plan;
  plan.set_digest(digest);
  return plan;
}

TEST(PlanSlicesTest, TheKeyChangesWithWhatEverySliceHolds) {
  const ClusterSnapshot snapshot = TwoDaemons();
  const v1::Plan plan = PlanWithDigest("p1");
  const std::string key = SliceKey(snapshot, plan, std::nullopt);
  EXPECT_EQ(SliceKey(TwoDaemons(), plan, std::nullopt), key);
  EXPECT_NE(SliceKey(snapshot, PlanWithDigest("p2"), std::nullopt), key);

  ClusterSnapshot moved = TwoDaemons();
  moved.daemons[1].set_data_plane_address("ucx-1-new-worker");
  EXPECT_NE(SliceKey(moved, plan, std::nullopt), key);

  ClusterSnapshot registered_anew = TwoDaemons();
  registered_anew.destination_registrations[1] = 7;  // new segments, perhaps
  EXPECT_NE(SliceKey(registered_anew, plan, std::nullopt), key);
  ClusterSnapshot other_rank_anew = TwoDaemons();
  other_rank_anew.destination_registrations[0] = 9;  // not written straight into
  EXPECT_EQ(SliceKey(other_rank_anew, plan, std::nullopt), key);

  ClusterSnapshot on_gpu = TwoDaemons();
  on_gpu.placement[1].set_device(3);
  EXPECT_NE(SliceKey(on_gpu, plan, std::nullopt), key);

  v1::NcclSetup nccl;
  nccl.set_unique_id("id-1");
  const std::string with_nccl = SliceKey(snapshot, plan, nccl);
  EXPECT_NE(with_nccl, key);
  nccl.set_unique_id("id-2");
  EXPECT_NE(SliceKey(snapshot, plan, nccl), with_nccl);

  ClusterSnapshot quantized = TwoDaemons();
  v1::QuantizedSource& q = quantized.quantized_sources.emplace_back();
  q.set_rank(0);
  q.set_view(2);
  q.set_source_dtype("BF16");
  EXPECT_NE(SliceKey(quantized, plan, std::nullopt), key);
}

TEST(PlanSlicesTest, ASliceCarriesOnlyTheDaemonsOwnViews) {
  ClusterSnapshot snapshot = TwoDaemons();
  v1::QuantizedSource& on_source = snapshot.quantized_sources.emplace_back();
  on_source.set_rank(0);
  on_source.set_view(4);
  v1::QuantizedSource& on_arrival = snapshot.quantized_on_arrival.emplace_back();
  on_arrival.set_rank(0);
  on_arrival.set_view(8);
  const transport::ViewKeySet compared = {
      {v1::ROLE_SOURCE, 0, 1}, {v1::ROLE_DESTINATION, 0, 2}, {v1::ROLE_DESTINATION, 1, 3}};
  const v1::Plan plan = PlanWithDigest("p1");
  const transport::RankPlacement where = WhereRanksAre(snapshot);

  const v1::PlanSlice source_slice =
      SliceFor(snapshot, plan, where, 0, std::nullopt, compared).plan();
  EXPECT_EQ(source_slice.digest(), "p1");
  EXPECT_EQ(source_slice.daemon_index(), 0);
  EXPECT_EQ(source_slice.daemons_size(), 2);
  EXPECT_EQ(source_slice.placement_size(), 3);
  EXPECT_FALSE(source_slice.has_nccl());
  ASSERT_EQ(source_slice.quantized_sources_size(), 1);
  EXPECT_EQ(source_slice.quantized_sources(0).view(), 4);
  EXPECT_EQ(source_slice.quantized_on_arrival_size(), 0);
  ASSERT_EQ(source_slice.compared_views().views_size(), 1);
  EXPECT_EQ(source_slice.compared_views().views(0).view(), 1);

  const v1::PlanSlice destination_slice =
      SliceFor(snapshot, plan, where, 1, std::nullopt, compared).plan();
  EXPECT_EQ(destination_slice.quantized_sources_size(), 0);
  ASSERT_EQ(destination_slice.quantized_on_arrival_size(), 1);
  EXPECT_EQ(destination_slice.quantized_on_arrival(0).view(), 8);
  std::vector<int32_t> views;
  for (const v1::ViewKey& key : destination_slice.compared_views().views()) {
    views.push_back(key.view());
  }
  EXPECT_THAT(views, ElementsAre(2, 3));
}

TEST(PlanSlicesTest, ASliceGoesAgainToANewSessionForANewKeyOrAfterAFailedSend) {
  SlicesSent sent;
  auto session = std::make_shared<NoChannel>();
  std::shared_ptr<DaemonChannel> channel = session;
  EXPECT_TRUE(sent.Lacks(0, channel, "k1"));
  sent.Sent(0, channel, "k1");
  EXPECT_FALSE(sent.Lacks(0, channel, "k1"));
  EXPECT_TRUE(sent.Lacks(0, channel, "k2"));
  EXPECT_TRUE(sent.Lacks(1, channel, "k1"));  // another daemon
  std::shared_ptr<DaemonChannel> reconnected = std::make_shared<NoChannel>();
  EXPECT_TRUE(sent.Lacks(0, reconnected, "k1"));
  sent.Forget(0);
  EXPECT_TRUE(sent.Lacks(0, channel, "k1"));
  // A session that ended is not the one a slice went to, whatever comes next.
  sent.Sent(0, channel, "k1");
  channel.reset();
  session.reset();
  EXPECT_TRUE(sent.Lacks(0, std::make_shared<NoChannel>(), "k1"));
}

}  // namespace
}  // namespace refit::daemon

// The planner's contract beyond correctness: errors that name what is wrong, locality,
// hierarchical fan-out, balance, batching under the staging budget, determinism, caching.
#include "planner/planner.h"

#include <cstring>
#include <map>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "planner/check/byte_checker.h"
#include "planner/check/coverage_checker.h"
#include "planner/cost_model.h"
#include "planner/layout.h"
#include "planner/link_loads.h"
#include "planner/lower_bound.h"
#include "planner/problem.h"
#include "planner/reference_refits.h"
#include "planner/reshard.h"
#include "planner/testing/layout_builder.h"
#include "planner/testing/relay_buffer_case.h"
#include "planner/topology.h"

namespace refit::planner {
namespace {

using refit::testing::LayoutBuilder;

struct Compiled {
  Layout sources;
  Layout destinations;
};

Compiled Compile(const LayoutBuilder& src, const LayoutBuilder& dst) {
  absl::StatusOr<Layout> s = CompileLayout(src.spec(), "source");
  absl::StatusOr<Layout> d = CompileLayout(dst.spec(), "destination");
  EXPECT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(d.ok()) << d.status();
  return Compiled{*s, *d};
}

absl::StatusOr<std::shared_ptr<const Plan>> PlanOf(const Compiled& c,
                                                   PlanOptions options = PlanOptions()) {
  return BuildPlan(c.sources, c.destinations, DgxH100Topology(), options);
}

std::string ErrorOf(const LayoutBuilder& src, const LayoutBuilder& dst) {
  absl::StatusOr<std::shared_ptr<const Plan>> plan = PlanOf(Compile(src, dst));
  EXPECT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(plan.status().message());
}

// torch.chunk shards: 2 rows over 3 ranks give 1, 1 and 0 rows; 5 rows over 4 give 2, 2,
// 1 and 0. The empty shards are registered like any other and the plan ignores them.
TEST(PlannerTest, UnevenAndEmptyChunkShardsArePlannedAndCovered) {
  LayoutBuilder src, dst;
  src.Tensor("small", {2, 8}).Tensor("odd", {5, 4});
  dst.Tensor("small", {2, 8}).Tensor("odd", {5, 4});
  const int64_t small_rows[3] = {1, 1, 0}, odd_rows[4] = {2, 2, 1, 0};
  for (int r = 0, row = 0; r < 3; row += small_rows[r], ++r) {
    src.Rank(r, "train", r).View(r, "small", {row, 0}, {small_rows[r], 8});
  }
  for (int r = 0, row = 0; r < 4; row += odd_rows[r], ++r) {
    dst.Rank(r, "infer", r).View(r, "odd", {row, 0}, {odd_rows[r], 4});
  }
  src.View(0, "odd", {0, 0}, {5, 4});
  for (int r = 0; r < 4; ++r) dst.View(r, "small", {0, 0}, {2, 8});
  const Compiled c = Compile(src, dst);
  EXPECT_EQ(c.sources.views.size(), 3u);       // the empty one holds nothing
  EXPECT_EQ(c.destinations.views.size(), 7u);  // nor here
  absl::StatusOr<std::shared_ptr<const Plan>> plan = PlanOf(c);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ((*plan)->stats.total_bytes, (4 * 2 * 8 + 5 * 4) * 4);
  EXPECT_TRUE(check::CheckCoverage(c.sources, c.destinations, **plan).ok());
  EXPECT_TRUE(check::CheckBytes(c.sources, c.destinations, **plan, 1 << 20).ok());
}

TEST(PlannerErrorsTest, DestinationTensorMissingAtSources) {
  LayoutBuilder src, dst;
  src.Tensor("a", {4}).Replicated("a", {0});
  dst.Tensor("b", {4}).Replicated("b", {0});
  EXPECT_EQ(ErrorOf(src, dst), "b: the destinations declare this tensor but the sources do not");
}

TEST(PlannerErrorsTest, DtypeOrShapeDisagree) {
  LayoutBuilder src, dst, dst2;
  src.Tensor("w", {4, 8}, "BF16").Replicated("w", {0});
  dst.Tensor("w", {4, 8}, "F32").Replicated("w", {0});
  EXPECT_NE(ErrorOf(src, dst).find("w: destination dtype F32 shape [4, 8] disagrees with source "
                                   "dtype BF16 shape [4, 8]"),
            std::string::npos);
  dst2.Tensor("w", {8, 4}, "BF16").Replicated("w", {0});
  EXPECT_NE(ErrorOf(src, dst2).find("shape [8, 4] disagrees"), std::string::npos);
}

TEST(PlannerErrorsTest, DestinationBoxNotCovered) {
  LayoutBuilder src, dst;
  src.Tensor("w", {8, 4}).View(0, "w", {0, 0}, {3, 4}).View(1, "w", {5, 0}, {3, 4});
  dst.Tensor("w", {8, 4}).Chunked("w", 0, {0, 1});
  EXPECT_EQ(ErrorOf(src, dst),
            "w: destination rank 0 box [0:4, 0:4] is not covered by any source (uncovered part "
            "[3:4, 0:4])");
}

TEST(PlannerErrorsTest, UnknownStrategy) {
  LayoutBuilder src, dst;
  src.Tensor("w", {4}).Replicated("w", {0});
  dst.Tensor("w", {4}).Replicated("w", {0});
  PlanOptions options;
  options.strategy = "broadcast_everything";
  absl::StatusOr<std::shared_ptr<const Plan>> plan = PlanOf(Compile(src, dst), options);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("unknown strategy"), std::string::npos);
}

// Sources and destinations on one host (one NVLink domain), some on the same GPU.
TEST(PlannerTest, PrefersSameDeviceThenNvlink) {
  LayoutBuilder src, dst;
  src.Tensor("w", {8, 8}).Rank(0, "node", 0).Rank(1, "node", 1).Rank(2, "far", 0);
  src.Replicated("w", {0, 1, 2});
  dst.Tensor("w", {8, 8}).Rank(0, "node", 1).Rank(1, "node", 5);
  dst.Replicated("w", {0, 1});
  absl::StatusOr<std::shared_ptr<const Plan>> plan = PlanOf(Compile(src, dst));
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::map<int64_t, v1::Route> route_to;
  for (const Transfer& t : (*plan)->transfers) route_to[t.dst.rank_index] = t.route;
  EXPECT_EQ(route_to[0], v1::ROUTE_LOCAL);   // same host and device as source rank 1
  EXPECT_EQ(route_to[1], v1::ROUTE_NVLINK);  // same host
  EXPECT_EQ((*plan)->stats.network_bytes, 0);
}

// A replicated tensor needed by 8 ranks of one remote node crosses the network once.
TEST(PlannerTest, HierarchicalFanOutCrossesTheNetworkOncePerDomain) {
  LayoutBuilder src, dst;
  src.Tensor("norm", {1024}).Rank(0, "trainer", 0).Replicated("norm", {0});
  dst.Tensor("norm", {1024});
  for (int r = 0; r < 8; ++r) dst.Rank(r, "infer", r);
  dst.Replicated("norm", {0, 1, 2, 3, 4, 5, 6, 7});
  const Compiled c = Compile(src, dst);
  absl::StatusOr<std::shared_ptr<const Plan>> plan = PlanOf(c);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ((*plan)->stats.network_bytes, 1024 * 4);
  EXPECT_EQ((*plan)->stats.nvlink_bytes, 7 * 1024 * 4);
  EXPECT_EQ((*plan)->stats.lower_bound_network_bytes, 1024 * 4);
  // Forwards run in a later batch than the arrival they forward.
  int32_t arrival_batch = -1;
  for (const Transfer& t : (*plan)->transfers) {
    if (t.route == v1::ROUTE_NETWORK) arrival_batch = t.batch;
  }
  for (const Transfer& t : (*plan)->transfers) {
    if (t.route == v1::ROUTE_NVLINK) EXPECT_GT(t.batch, arrival_batch);
  }
  EXPECT_TRUE(check::CheckCoverage(c.sources, c.destinations, **plan).ok());

  PlanOptions flat;
  flat.hierarchical = false;
  absl::StatusOr<std::shared_ptr<const Plan>> direct = PlanOf(c, flat);
  ASSERT_TRUE(direct.ok());
  EXPECT_EQ((*direct)->stats.network_bytes, 8 * 1024 * 4);
}

// 16 tensors, each replicated on 4 trainer nodes, all needed by one inference node:
// byte-aware source choice spreads the sending over every replica.
TEST(PlannerTest, BalancesSendersAcrossReplicas) {
  LayoutBuilder src, dst;
  for (int r = 0; r < 4; ++r) src.Rank(r, "trainer-" + std::to_string(r), 0);
  for (int r = 0; r < 8; ++r) dst.Rank(r, "infer", r);
  for (int t = 0; t < 16; ++t) {
    const std::string name = "layer." + std::to_string(t);
    src.Tensor(name, {256, 64}).Replicated(name, {0, 1, 2, 3});
    dst.Tensor(name, {256, 64}).Chunked(name, 0, {0, 1, 2, 3, 4, 5, 6, 7});
  }
  const Compiled c = Compile(src, dst);
  absl::StatusOr<std::shared_ptr<const Plan>> plan = PlanOf(c);
  ASSERT_TRUE(plan.ok());
  std::map<int32_t, int64_t> sent;
  for (const Transfer& t : (*plan)->transfers) sent[t.src.rank_index] += (*plan)->BytesOf(t);
  ASSERT_EQ(sent.size(), 4u);
  const int64_t total = 16 * 256 * 64 * 4;
  for (const auto& [rank, bytes] : sent) EXPECT_EQ(bytes, total / 4) << "source rank " << rank;
}

// One large piece held by 4 replicas is split so every replica sends a part.
TEST(PlannerTest, SplitsLargePiecesAcrossReplicas) {
  LayoutBuilder src, dst;
  for (int r = 0; r < 4; ++r) src.Rank(r, "trainer-" + std::to_string(r), 0);
  src.Tensor("embed", {4096, 256}).Replicated("embed", {0, 1, 2, 3});
  dst.Tensor("embed", {4096, 256}).Rank(0, "infer", 0).Replicated("embed", {0});
  PlanOptions options;
  options.split_threshold_bytes = 1 << 20;
  absl::StatusOr<std::shared_ptr<const Plan>> plan = PlanOf(Compile(src, dst), options);
  ASSERT_TRUE(plan.ok());
  std::map<int32_t, int64_t> sent;
  for (const Transfer& t : (*plan)->transfers) sent[t.src.rank_index] += (*plan)->BytesOf(t);
  EXPECT_EQ(sent.size(), 4u);
  for (const auto& [rank, bytes] : sent) EXPECT_EQ(bytes, 4096 * 256 * 4 / 4);
}

TEST(PlannerTest, BatchesRespectTheStagingBudget) {
  LayoutBuilder src, dst;
  for (int r = 0; r < 4; ++r) src.Rank(r, "trainer-" + std::to_string(r), 0);
  for (int r = 0; r < 4; ++r) dst.Rank(r, "infer-" + std::to_string(r), 0);
  for (int t = 0; t < 8; ++t) {
    const std::string name = "w" + std::to_string(t);
    src.Tensor(name, {64, 64}).Chunked(name, 0, {0, 1, 2, 3});
    dst.Tensor(name, {64, 64}).Chunked(name, 1, {0, 1, 2, 3});
  }
  PlanOptions options;
  options.staging_budget_bytes = 10000;  // each piece is 16 x 16 x 4 = 1024 bytes
  const Compiled c = Compile(src, dst);
  absl::StatusOr<std::shared_ptr<const Plan>> plan = PlanOf(c, options);
  ASSERT_TRUE(plan.ok());
  std::map<std::pair<int32_t, int32_t>, int64_t> sent, received;
  for (const Transfer& t : (*plan)->transfers) {
    sent[{t.batch, t.src.rank_index}] += (*plan)->BytesOf(t);
    received[{t.batch, t.dst.rank_index}] += (*plan)->BytesOf(t);
  }
  for (const auto& [key, bytes] : sent) EXPECT_LE(bytes, options.staging_budget_bytes);
  for (const auto& [key, bytes] : received) EXPECT_LE(bytes, options.staging_budget_bytes);
  // 8 tensors x 4 pieces x 1024 bytes per rank need at least 4 batches of 10000 bytes.
  EXPECT_GE((*plan)->num_batches, 4);
  EXPECT_LE((*plan)->num_batches, 5);
  EXPECT_TRUE(check::CheckCoverage(c.sources, c.destinations, **plan).ok());
}

// The same boxes, but rank 0 lists an empty view first in one of the layouts: the plans
// move the same bytes between the same compiled views, but the wire names rank 0's view of
// "a" 0 in one and 1 in the other, so the digests (by which refitd keeps its slice) differ.
TEST(PlannerTest, TheDigestCoversTheViewIdsTheWireUses) {
  LayoutBuilder src, dst, shifted;
  src.Tensor("a", {4, 8}).Tensor("b", {1, 8}).Rank(0, "train", 0);
  src.View(0, "a", {0, 0}, {4, 8}).View(0, "b", {0, 0}, {1, 8});
  for (LayoutBuilder* d : {&dst, &shifted}) {
    d->Tensor("a", {4, 8}).Tensor("b", {1, 8}).Rank(0, "infer", 0).Rank(1, "infer", 1);
  }
  dst.View(0, "a", {0, 0}, {4, 8}).View(1, "b", {0, 0}, {1, 8});
  shifted.View(0, "b", {1, 0}, {0, 8}).View(0, "a", {0, 0}, {4, 8}).View(1, "b", {0, 0}, {1, 8});
  absl::StatusOr<std::shared_ptr<const Plan>> plain = PlanOf(Compile(src, dst));
  absl::StatusOr<std::shared_ptr<const Plan>> moved = PlanOf(Compile(src, shifted));
  ASSERT_TRUE(plain.ok() && moved.ok());
  ASSERT_EQ((*plain)->transfers.size(), (*moved)->transfers.size());
  EXPECT_EQ(std::memcmp((*plain)->transfers.data(), (*moved)->transfers.data(),
                        (*plain)->transfers.size() * sizeof(Transfer)),
            0);
  EXPECT_NE((*plain)->digest, (*moved)->digest);
}

TEST(PlannerTest, DeterministicDigestAndCache) {
  LayoutBuilder src, dst;
  src.Tensor("w", {64, 32}).Chunked("w", 0, {0, 1, 2});
  dst.Tensor("w", {64, 32}).Chunked("w", 1, {0, 1});
  const Compiled c = Compile(src, dst), again = Compile(src, dst);
  absl::StatusOr<std::shared_ptr<const Plan>> a = PlanOf(c), b = PlanOf(again);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ((*a)->digest, (*b)->digest);
  EXPECT_EQ((*a)->digest.size(), 32u);
  PlanOptions other;
  other.strategy = kStrategyGatherBroadcast;
  EXPECT_NE((*PlanOf(c, other))->digest, (*a)->digest);

  PlanCache cache;
  bool from_cache = true;
  auto first =
      cache.GetOrBuild(c.sources, c.destinations, DgxH100Topology(), PlanOptions(), &from_cache);
  EXPECT_FALSE(from_cache);
  auto second = cache.GetOrBuild(again.sources, again.destinations, DgxH100Topology(),
                                 PlanOptions(), &from_cache);
  EXPECT_TRUE(from_cache);
  EXPECT_EQ(first->get(), second->get());
  cache.GetOrBuild(c.sources, c.destinations, DgxH100Topology(), other, &from_cache);
  EXPECT_FALSE(from_cache);
}

TEST(PlannerTest, LowerBoundSkipsWhatTheDomainAlreadyHolds) {
  // The destination node holds half of the tensor in a colocated source rank.
  LayoutBuilder src, dst;
  src.Tensor("w", {16, 4}).Rank(0, "node", 0).Rank(1, "trainer", 0);
  src.View(0, "w", {0, 0}, {8, 4}).View(1, "w", {8, 0}, {8, 4});
  dst.Tensor("w", {16, 4}).Rank(0, "node", 1).Replicated("w", {0});
  absl::StatusOr<std::shared_ptr<const Plan>> plan = PlanOf(Compile(src, dst));
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ((*plan)->stats.lower_bound_network_bytes, 8 * 4 * 4);
  EXPECT_EQ((*plan)->stats.network_bytes, 8 * 4 * 4);
  EXPECT_EQ((*plan)->stats.nvlink_bytes, 8 * 4 * 4);
  EXPECT_GT((*plan)->stats.predicted_seconds, (*plan)->stats.lower_bound_seconds);
}

TEST(PlannerTest, TheBoundLetsReplicasForwardWhatTheSourcesSendOnce) {
  // One trainer node holds w; 1 or 4 inference nodes each need all of it. The bytes must
  // enter every inference node, but leave the trainer node only once: a plan that forwards
  // from node to node takes as long for four replicas as for one.
  auto bound_for = [](int replicas, const char* strategy, double* predicted) {
    LayoutBuilder src, dst;
    src.Tensor("w", {1024, 1024}).Rank(0, "trainer", 0).Replicated("w", {0});
    dst.Tensor("w", {1024, 1024});
    for (int r = 0; r < replicas; ++r) {
      dst.Rank(r, absl::StrCat("inference-", r), 0).Replicated("w", {r});
    }
    PlanOptions options;
    options.strategy = strategy;
    absl::StatusOr<std::shared_ptr<const Plan>> plan = PlanOf(Compile(src, dst), options);
    EXPECT_TRUE(plan.ok()) << plan.status();
    *predicted = (*plan)->stats.predicted_seconds;
    return (*plan)->stats.lower_bound_seconds;
  };
  double predicted = 0;
  const double one = bound_for(1, kStrategyReshard, &predicted);
  EXPECT_GT(one, 0);
  EXPECT_DOUBLE_EQ(bound_for(4, kStrategyReshard, &predicted), one);
  EXPECT_LE(bound_for(4, kStrategyGatherBroadcast, &predicted), predicted);
}

// One trainer node (TP8) feeding `replicas` inference nodes (TP8 each, another split):
// 16 tensors of 8 GiB, 128 GiB of weights (a 70B model in BF16).
Compiled FanOut(int replicas) {
  LayoutBuilder src, dst;
  std::vector<int64_t> trainers, replica_ranks;
  for (int r = 0; r < 8; ++r) {
    src.Rank(r, "trainer", r);
    trainers.push_back(r);
  }
  for (int r = 0; r < 8 * replicas; ++r) dst.Rank(r, absl::StrCat("inference-", r / 8), r % 8);
  for (int t = 0; t < 16; ++t) {
    const std::string name = absl::StrCat("layer.", t, ".w");
    src.Tensor(name, {65536, 65536}, "BF16").Chunked(name, 0, trainers);
    dst.Tensor(name, {65536, 65536}, "BF16");
    for (int replica = 0; replica < replicas; ++replica) {
      replica_ranks.clear();
      for (int r = 0; r < 8; ++r) replica_ranks.push_back(replica * 8 + r);
      dst.Chunked(name, 1, replica_ranks);
    }
  }
  return Compile(src, dst);
}

// Bucketed destination ranks pass their bytes through a bucket and keep nothing: the plan
// reaches them like any other, but never forwards from them, neither inside their NVLink
// domain nor to the next domain of a relay tree. Replica 1 is bucketed whole, replica 2
// in part (its readable members still forward, to the bucketed ones too).
TEST(PlannerTest, NothingForwardsFromABucketedRank) {
  LayoutBuilder src, dst;
  std::vector<int64_t> trainers, everyone;
  for (int r = 0; r < 8; ++r) {
    src.Rank(r, "trainer", r);
    trainers.push_back(r);
  }
  const int replicas = 4;
  for (int r = 0; r < 8 * replicas; ++r) {
    dst.Rank(r, absl::StrCat("inference-", r / 8), r % 8);
    everyone.push_back(r);
  }
  src.Tensor("norm", {4096}).Replicated("norm", trainers);
  dst.Tensor("norm", {4096}).Replicated("norm", everyone);
  for (int t = 0; t < 4; ++t) {
    const std::string name = absl::StrCat("layer.", t, ".w");
    src.Tensor(name, {8192, 8192}, "BF16").Chunked(name, 0, trainers);
    dst.Tensor(name, {8192, 8192}, "BF16");
    for (int replica = 0; replica < replicas; ++replica) {
      std::vector<int64_t> replica_ranks;
      for (int r = 0; r < 8; ++r) replica_ranks.push_back(replica * 8 + r);
      dst.Chunked(name, 1, replica_ranks);
    }
  }
  auto bucketed = [](int64_t rank) { return (rank >= 8 && rank < 16) || rank == 16 || rank == 17; };
  v1::LayoutSpec spec = dst.spec();
  for (v1::RankLayout& rank : *spec.mutable_ranks()) rank.set_bucketed(bucketed(rank.rank()));
  absl::StatusOr<Layout> sources = CompileLayout(src.spec(), "source");
  absl::StatusOr<Layout> destinations = CompileLayout(spec, "destination");
  ASSERT_TRUE(sources.ok() && destinations.ok());
  absl::StatusOr<std::shared_ptr<const Plan>> plan =
      BuildPlan(*sources, *destinations, DgxH100Topology(), PlanOptions());
  ASSERT_TRUE(plan.ok()) << plan.status();
  const absl::Status covered = check::CheckCoverage(*sources, *destinations, **plan);
  EXPECT_TRUE(covered.ok()) << covered;
  std::map<int64_t, int64_t> received;
  int64_t forwarded_to_bucketed = 0;
  for (const Transfer& t : (*plan)->transfers) {
    if (t.src.kind == EndpointKind::kDestinationView) {
      EXPECT_FALSE(bucketed(destinations->ranks[t.src.rank_index].rank))
          << "forwards from bucketed rank " << destinations->ranks[t.src.rank_index].rank;
    }
    if (t.dst.kind == EndpointKind::kDestinationView) {
      const int64_t rank = destinations->ranks[t.dst.rank_index].rank;
      received[rank] += (*plan)->BytesOf(t);
      if (bucketed(rank) && t.src.kind == EndpointKind::kDestinationView) ++forwarded_to_bucketed;
    }
  }
  const int64_t per_rank = 4096 * 4 + 4 * int64_t{8192} * 1024 * 2;
  for (int64_t rank : everyone) EXPECT_EQ(received[rank], per_rank) << "rank " << rank;
  // Replica 2's readable members forward to its bucketed ones (the norm, at least).
  EXPECT_GT(forwarded_to_bucketed, 0);
  // The other replicas still relay: the trainers send well under once per replica.
  EXPECT_GT((*plan)->stats.relayed_bytes, 0);
}

TEST(PlannerTest, RelaysLetManyReplicasTakeAboutAsLongAsOne) {
  const Compiled c = FanOut(8);
  absl::StatusOr<std::shared_ptr<const Plan>> plan = PlanOf(c);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(check::CheckCoverage(c.sources, c.destinations, **plan).ok())
      << check::CheckCoverage(c.sources, c.destinations, **plan);
  const PlanStats& s = (*plan)->stats;
  // The trainer node's NICs send the weights about once; the replicas forward the rest.
  int64_t from_sources = 0;
  for (const Transfer& t : (*plan)->transfers) {
    if (t.route == v1::ROUTE_NETWORK && t.src.IsSourceSide()) from_sources += (*plan)->BytesOf(t);
  }
  const int64_t weights = int64_t{16} * 65536 * 65536 * 2;
  EXPECT_GT(s.relayed_bytes, 0);
  EXPECT_LE(from_sources, weights * 3 / 2) << "the trainer node sent " << from_sources;
  // Without relays it would take several times as long (planned to compare, or bounded).
  const double direct =
      s.direct_predicted_seconds > 0 ? s.direct_predicted_seconds : s.direct_lower_bound_seconds;
  EXPECT_GT(direct, 4 * s.predicted_seconds);
  EXPECT_LE(s.predicted_seconds, 1.15 * s.lower_bound_seconds);
  PlanOptions gather;
  gather.strategy = kStrategyGatherBroadcast;
  absl::StatusOr<std::shared_ptr<const Plan>> baseline = PlanOf(c, gather);
  ASSERT_TRUE(baseline.ok());
  EXPECT_LT(s.predicted_seconds, (*baseline)->stats.predicted_seconds);
}

// Relays form trees, not chains: the deepest of 16 replicas is at most log2(16) + 1
// network hops from the trainers (a chain would put the last one 16 hops away, a batch
// each), and no inference GPU forwards much more over its NIC than it receives.
TEST(PlannerTest, RelaysReachTheDeepestReplicaInLogarithmicallyManyHops) {
  const Compiled c = FanOut(16);
  absl::StatusOr<std::shared_ptr<const Plan>> plan = PlanOf(c);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_GT((*plan)->stats.relayed_bytes, 0);
  // Network hops from a source to (piece, destination view); transfers are in batch order
  // and a forward follows the transfer that brought its bytes.
  std::map<std::pair<int32_t, int32_t>, int> hops;
  std::map<int32_t, int64_t> nic_in, nic_out;  // per destination rank
  int deepest = 0;
  for (const Transfer& t : (*plan)->transfers) {
    const bool network = t.route == v1::ROUTE_NETWORK;
    int depth = network ? 1 : 0;
    if (!t.src.IsSourceSide()) {
      auto it = hops.find({t.piece, t.src.index});
      ASSERT_NE(it, hops.end()) << "a forward of piece " << t.piece << " before it arrived";
      depth += it->second;
      if (network) nic_out[t.src.rank_index] += (*plan)->BytesOf(t);
    }
    if (network) nic_in[t.dst.rank_index] += (*plan)->BytesOf(t);
    hops[{t.piece, t.dst.index}] = depth;
    deepest = std::max(deepest, depth);
  }
  EXPECT_LE(deepest, 5);
  for (const auto& [rank, bytes] : nic_out) {
    EXPECT_LE(bytes, nic_in[rank] * 5 / 4) << "inference rank " << rank << " forwards " << bytes
                                           << " bytes and receives " << nic_in[rank];
  }
}

// Where the plan without relays cannot win (a floor of it, found without keeping its
// transfers, is above the relayed plan), it is routed but not priced, and says so; the
// figure it gives is a true floor: pricing that plan in full gives at least as much.
TEST(PlannerTest, ADirectPlanThatCannotWinIsNotPricedAndSaysWhatItTakesAtLeast) {
  absl::StatusOr<RefitScenario> scenario = ReferenceRefit("dsv3-gb200");
  ASSERT_TRUE(scenario.ok()) << scenario.status();
  absl::StatusOr<Layout> sources = CompileLayout(scenario->sources, "source");
  absl::StatusOr<Layout> destinations = CompileLayout(scenario->destinations, "destination");
  ASSERT_TRUE(sources.ok() && destinations.ok());
  PlanOptions options;
  // Pieces split finer than by default: the relayed plan (0.721 s) is then above what the
  // lower bound says any direct plan takes, and below the direct plan's batched floor, so
  // the direct plan must be routed to lose.
  options.split_threshold_bytes = 16 << 20;
  absl::StatusOr<std::shared_ptr<const Plan>> plan =
      BuildPlan(*sources, *destinations, scenario->topology, options);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const PlanStats& s = (*plan)->stats;
  ASSERT_EQ(s.chosen, "reshard_relays");
  // The relayed plan, the direct one, and (it uses relay buffers) the relayed one without.
  ASSERT_EQ(s.candidates.size(), 3u);
  EXPECT_EQ(s.candidates[2].name, "reshard_relays_without_relay_buffers");
  const PlanCandidate& direct = s.candidates[1];
  EXPECT_EQ(direct.name, "reshard_direct");
  EXPECT_TRUE(direct.at_least);
  EXPECT_GT(direct.predicted_seconds, s.predicted_seconds);
  EXPECT_EQ(s.direct_predicted_seconds, 0);
  EXPECT_GE(s.direct_lower_bound_seconds, direct.predicted_seconds);
  options.relays = false;
  absl::StatusOr<std::shared_ptr<const Plan>> priced =
      BuildPlan(*sources, *destinations, scenario->topology, options);
  ASSERT_TRUE(priced.ok()) << priced.status();
  EXPECT_GE((*priced)->stats.predicted_seconds, direct.predicted_seconds);
  // The floor is the first of the two floors above the relayed plan: the direct plan's
  // busiest link, else the sum of its batches' busiest links.
  absl::StatusOr<std::unique_ptr<PlanningProblem>> problem =
      MakePlanningProblem(*sources, *destinations, scenario->topology);
  ASSERT_TRUE(problem.ok()) << problem.status();
  const LowerBound bound = ComputeLowerBound(**problem);
  EXPECT_LT(bound.direct_seconds, s.predicted_seconds);
  const double busiest = ReshardBusiestLinkSeconds(**problem, options, bound);
  const double batched = ReshardBatchedFloorSeconds(**problem, options, bound);
  EXPECT_DOUBLE_EQ(direct.predicted_seconds, busiest > s.predicted_seconds ? busiest : batched);
  // The first floor is exactly the busiest link of the direct plan made in full.
  const ClusterMap& cluster = *(*problem)->cluster;
  LinkLoads loads(cluster.num_gpus());
  for (const Transfer& t : (*priced)->transfers) {
    loads.Add(t.route, cluster.EndpointGpu(t.src), cluster.EndpointGpu(t.dst),
              (*priced)->BytesOf(t));
  }
  EXPECT_DOUBLE_EQ(loads.BottleneckSeconds(cluster.bandwidths()), busiest);
}

// The two floors the planner compares a relayed plan with before making the plan without
// relays in full: its busiest link, then the sum of each batch's busiest link and least
// latency. Each is at most what pricing that plan gives, and the second is the tighter.
TEST(PlannerTest, TheDirectPlansFloorsAreBelowItsPriceAndTheBatchedOneIsTighter) {
  for (const char* name : {"dsv3-h100", "dsv3-gb200", "qwen3-235b"}) {
    absl::StatusOr<RefitScenario> scenario = ReferenceRefit(name);
    ASSERT_TRUE(scenario.ok()) << scenario.status();
    absl::StatusOr<Layout> sources = CompileLayout(scenario->sources, "source");
    absl::StatusOr<Layout> destinations = CompileLayout(scenario->destinations, "destination");
    ASSERT_TRUE(sources.ok() && destinations.ok());
    absl::StatusOr<std::unique_ptr<PlanningProblem>> problem =
        MakePlanningProblem(*sources, *destinations, scenario->topology);
    ASSERT_TRUE(problem.ok()) << problem.status();
    const LowerBound bound = ComputeLowerBound(**problem);
    PlanOptions options;
    options.relays = false;
    auto direct = std::make_shared<Plan>();
    ASSERT_TRUE(PlanReshard(**problem, options, bound, direct.get()).ok());
    PricePlan(**problem, direct.get());
    const double busiest = ReshardBusiestLinkSeconds(**problem, options, bound);
    const double batched = ReshardBatchedFloorSeconds(**problem, options, bound);
    // What the bound says no direct plan beats holds for this one.
    EXPECT_LE(bound.direct_seconds, busiest * (1 + 1e-12)) << name;
    EXPECT_GT(batched, busiest) << name;
    EXPECT_LE(batched, direct->stats.predicted_seconds * (1 + 1e-12)) << name;
    // The floor differs from the price only by the messages beyond one per batch.
    const Bandwidths& bw = (*problem)->cluster->bandwidths();
    EXPECT_GE(batched, direct->stats.predicted_seconds - direct->stats.predicted_latency_seconds +
                           direct->num_batches * (bw.batch_latency_s + bw.message_latency_s) - 1e-9)
        << name;
  }
}

TEST(PlannerTest, APlanThatRelaysNothingSaysSo) {
  absl::StatusOr<std::shared_ptr<const Plan>> plan = PlanOf(FanOut(1));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ((*plan)->stats.relayed_bytes, 0);
  EXPECT_EQ((*plan)->stats.direct_predicted_seconds, 0);
  EXPECT_EQ((*plan)->stats.direct_lower_bound_seconds, 0);
}

TEST(PlannerTest, AutoKeepsWhicheverStrategyIsPredictedFasterAndSaysWhatItPriced) {
  const Compiled c = FanOut(8);
  auto plan_with = [&](const char* strategy, bool relays) {
    PlanOptions options;
    options.strategy = strategy;
    options.relays = relays;
    absl::StatusOr<std::shared_ptr<const Plan>> plan = PlanOf(c, options);
    EXPECT_TRUE(plan.ok()) << plan.status();
    return *plan;
  };
  const auto seconds_of = [](const Plan& plan, const std::string& name) {
    for (const PlanCandidate& candidate : plan.stats.candidates) {
      if (candidate.name == name) return candidate.predicted_seconds;
    }
    return -1.0;
  };
  const auto broadcast = plan_with(kStrategyGatherBroadcast, true);
  const auto direct = plan_with(kStrategyReshard, false);
  const auto relayed = plan_with(kStrategyReshard, true);
  // Without relays, reshard sends every replica's bytes out of the trainer node: slower
  // than gather_broadcast's forwarding, so auto picks gather_broadcast...
  ASSERT_GT(direct->stats.predicted_seconds, broadcast->stats.predicted_seconds);
  const auto auto_direct = plan_with(kStrategyAuto, false);
  EXPECT_EQ(auto_direct->strategy, kStrategyGatherBroadcast);
  EXPECT_EQ(auto_direct->digest, broadcast->digest);
  EXPECT_EQ(auto_direct->stats.chosen, "gather_broadcast");
  ASSERT_EQ(auto_direct->stats.candidates.size(), 2u);
  EXPECT_EQ(seconds_of(*auto_direct, "reshard_direct"), direct->stats.predicted_seconds);
  EXPECT_EQ(seconds_of(*auto_direct, "gather_broadcast"), broadcast->stats.predicted_seconds);
  // ...and with relays reshard is faster, so auto picks it.
  ASSERT_LT(relayed->stats.predicted_seconds, broadcast->stats.predicted_seconds);
  const auto auto_relayed = plan_with(kStrategyAuto, true);
  EXPECT_EQ(auto_relayed->strategy, kStrategyReshard);
  EXPECT_EQ(auto_relayed->digest, relayed->digest);
  EXPECT_EQ(auto_relayed->stats.chosen, "reshard_relays");
  EXPECT_EQ(direct->stats.chosen, "reshard_direct");
  EXPECT_EQ(seconds_of(*auto_relayed, "reshard_relays"), relayed->stats.predicted_seconds);
  EXPECT_EQ(seconds_of(*auto_relayed, "gather_broadcast"), broadcast->stats.predicted_seconds);
  // A single strategy prices only what it chose among.
  EXPECT_EQ(seconds_of(*relayed, "gather_broadcast"), -1.0);
  EXPECT_EQ(seconds_of(*broadcast, "gather_broadcast"), broadcast->stats.predicted_seconds);
}

TEST(PlannerTest, RelayBuffersSpreadWhatADomainReceivesOverItsIdleNics) {
  const refit::testing::RelayBufferCase relay_case = refit::testing::MakeRelayBufferCase();
  const Compiled c = Compile(relay_case.sources, relay_case.destinations);
  auto plan_with = [&](bool relay_buffers) {
    PlanOptions options;
    options.staging_budget_bytes = relay_case.staging_budget_bytes;
    options.relay_buffers = relay_buffers;
    absl::StatusOr<std::shared_ptr<const Plan>> plan =
        BuildPlan(c.sources, c.destinations, relay_case.topology, options);
    EXPECT_TRUE(plan.ok()) << plan.status();
    return *plan;
  };
  const auto with = plan_with(true);
  const auto without = plan_with(false);
  ASSERT_TRUE(check::CheckCoverage(c.sources, c.destinations, *with).ok());
  ASSERT_TRUE(check::CheckBytes(c.sources, c.destinations, *with, int64_t{1} << 26).ok());
  const int64_t w_bytes = 1024 * 1024 * 4;
  EXPECT_EQ(without->stats.relay_buffer_bytes, 0);
  // The inference GPU's own NIC receives about a fifth of w; the four trainer GPUs of its
  // domain receive the rest into relay buffers and copy it over NVLink.
  std::map<int32_t, int64_t> nic_in_by_rank;  // source rank index of a buffer; -1: destination
  int64_t buffer_reads = 0;
  for (const Transfer& t : with->transfers) {
    if (t.dst.kind == EndpointKind::kRelayBuffer) {
      EXPECT_EQ(t.route, v1::ROUTE_NETWORK);
      EXPECT_EQ(t.src.kind, EndpointKind::kSourceView);
      EXPECT_EQ(with->pieces[t.dst.index].box, with->pieces[t.piece].box);
      nic_in_by_rank[t.dst.rank_index] += with->BytesOf(t);
    } else if (t.route == v1::ROUTE_NETWORK) {
      nic_in_by_rank[-1] += with->BytesOf(t);
    }
    if (t.src.kind == EndpointKind::kRelayBuffer) {
      EXPECT_EQ(t.route, v1::ROUTE_NVLINK);
      EXPECT_EQ(t.dst.kind, EndpointKind::kDestinationView);
      ++buffer_reads;
    }
  }
  ASSERT_EQ(nic_in_by_rank.size(), 5u) << "the inference GPU and four relay hosts receive";
  for (const auto& [rank, bytes] : nic_in_by_rank) {
    EXPECT_LE(bytes, w_bytes / 4) << "receiver " << rank << " takes more than its share";
  }
  EXPECT_EQ(with->stats.relay_buffer_bytes, w_bytes - nic_in_by_rank[-1]);
  EXPECT_GT(buffer_reads, 0);
  // A buffer lives from its batch to the next: no GPU holds much more than a batch's worth.
  EXPECT_GT(with->stats.relay_buffer_peak_bytes, 0);
  EXPECT_LE(with->stats.relay_buffer_peak_bytes, 2 * relay_case.staging_budget_bytes);
  EXPECT_LT(with->stats.predicted_seconds, 0.5 * without->stats.predicted_seconds);
  EXPECT_NE(with->digest, without->digest);
  // The plan without them was weighed, and lost.
  EXPECT_EQ(with->stats.chosen, "reshard_direct");
  ASSERT_EQ(with->stats.candidates.size(), 2u);
  EXPECT_EQ(with->stats.candidates[1].name, "reshard_direct_without_relay_buffers");
  EXPECT_GT(with->stats.candidates[1].predicted_seconds, with->stats.predicted_seconds);
}

// Where the extra NVLink hop of a relay buffer costs more than spreading the domain's
// NIC-in saves, the plan without relay buffers is chosen, and it is the one the planner
// makes when told not to use them. Here w (4 MiB) fits one batch: straight into the
// inference GPU it takes 84 us and one batch; through buffers 17 us on five NICs, but a
// second batch for the NVLink copies, and a batch costs 100 us.
TEST(PlannerTest, RelayBuffersAreDroppedWhereTheCostModelSaysTheyLose) {
  refit::testing::RelayBufferCase relay_case = refit::testing::MakeRelayBufferCase();
  relay_case.topology.set_batch_latency_us(100);
  relay_case.topology.set_message_latency_us(5);
  const Compiled c = Compile(relay_case.sources, relay_case.destinations);
  PlanOptions options;
  options.staging_budget_bytes = int64_t{64} << 20;
  absl::StatusOr<std::shared_ptr<const Plan>> chosen =
      BuildPlan(c.sources, c.destinations, relay_case.topology, options);
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  options.relay_buffers = false;
  absl::StatusOr<std::shared_ptr<const Plan>> without =
      BuildPlan(c.sources, c.destinations, relay_case.topology, options);
  ASSERT_TRUE(without.ok()) << without.status();
  const PlanStats& s = (*chosen)->stats;
  EXPECT_EQ(s.chosen, "reshard_direct_without_relay_buffers");
  EXPECT_EQ(s.relay_buffer_bytes, 0);
  EXPECT_EQ((*chosen)->digest, (*without)->digest);
  // The plan with them was priced first and is the slower.
  ASSERT_EQ(s.candidates.size(), 2u);
  EXPECT_EQ(s.candidates[0].name, "reshard_direct");
  EXPECT_FALSE(s.candidates[0].at_least);
  EXPECT_GT(s.candidates[0].predicted_seconds, s.predicted_seconds);
  EXPECT_EQ(s.candidates[1].predicted_seconds, s.predicted_seconds);
}

}  // namespace
}  // namespace refit::planner

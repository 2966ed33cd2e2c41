// Several refitd data planes in one process (a thread and a UCX worker each, talking over
// UCX on this machine): random layouts spread over the daemons by host, planned with both
// strategies, executed by every daemon at once; every destination byte must arrive, and a
// daemon whose peer never shows up fails at its deadline instead of hanging.
#include "transport/plan_executor.h"

#include <atomic>
#include <functional>
#include <map>
#include <random>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "planner/layout.h"
#include "planner/plan_proto.h"
#include "planner/planner.h"
#include "planner/testing/layout_builder.h"
#include "planner/testing/relay_buffer_case.h"
#include "planner/topology.h"
#include "transport/peer_destinations.h"
#include "transport/testing/backed_layouts.h"

namespace refit::transport {
namespace {

// Ranks go to daemons by host, so ranks sharing a host share a daemon.
RankPlacement PlaceByHost(const v1::LayoutSpec& sources, const v1::LayoutSpec& destinations,
                          int32_t daemons) {
  RankPlacement placement;
  std::map<std::string, int32_t> daemon_of_host;
  for (auto [spec, role] : {std::make_pair(&sources, v1::ROLE_SOURCE),
                            std::make_pair(&destinations, v1::ROLE_DESTINATION)}) {
    for (const v1::RankLayout& r : spec->ranks()) {
      auto [it, inserted] = daemon_of_host.emplace(r.host(), daemon_of_host.size() % daemons);
      placement.Place(role, r.rank(), it->second);
    }
  }
  return placement;
}

// Every rank of both sides in one map over the same shared memory the daemons map (the
// view the test checks the result through), source views filled with their pattern.
void AddEveryRank(const v1::LayoutSpec& sources, const v1::LayoutSpec& destinations,
                  BufferMap* everything) {
  for (const v1::RankLayout& r : sources.ranks()) {
    ASSERT_TRUE(everything->AddRank(v1::ROLE_SOURCE, r).ok());
    testing::FillViews(everything, v1::ROLE_SOURCE, r);
  }
  for (const v1::RankLayout& r : destinations.ranks()) {
    ASSERT_TRUE(everything->AddRank(v1::ROLE_DESTINATION, r).ok());
  }
}

// How the test's daemons (all on this host) use shared memory between them: not at all,
// handing chunks over through their outboxes, or that and writing pieces from source views
// straight into the destination ranks of the others.
enum class Sharing { kNone, kHandoff, kStraight };

struct Daemon {
  std::unique_ptr<UcxWorker> worker;
  std::unique_ptr<BufferMap> buffers;
  absl::StatusOr<ExecutionStats> result = absl::UnknownError("not run");
  StagingPool staging{HostStagingAllocator()};
  SharedMemoryOutbox outbox;
  SharedMemoryInboxes inboxes;
  PeerDestinations peer_destinations;
};

// Runs `plan` on `count` daemons at once, `runs` epochs in a row (numbered from `epoch`),
// each daemon keeping its host staging pool across them as refitd does; returns each
// daemon's outcome of the last epoch run, and, when asked, how often each pool allocated.
// With `sharing`, every pair of daemons hands chunks over through shared memory
// (`outbox_allocations`: how often each daemon's outbox allocated), and with kStraight
// writes pieces straight into the others' destination ranks.
std::vector<absl::StatusOr<ExecutionStats>> RunOnDaemons(
    const v1::Plan& plan, const v1::LayoutSpec& sources, const v1::LayoutSpec& destinations,
    const RankPlacement& placement, int32_t count, uint32_t epoch, absl::Duration timeout,
    int32_t missing_daemon = -1, const Interrupt* interrupt = nullptr, int runs = 1,
    std::vector<int64_t>* staging_allocations = nullptr,
    int64_t chunk_bytes = PlanExecutor::kDefaultMessageChunkBytes,
    std::vector<int64_t>* staging_held_bytes = nullptr, Sharing sharing = Sharing::kNone,
    std::vector<int64_t>* outbox_allocations = nullptr,
    const std::function<bool(int32_t, PlanExecutor*, UcxWorker*)>& before_run = nullptr,
    const std::function<void(int32_t)>& after_run = nullptr) {
  std::vector<Daemon> daemons(count);
  for (int32_t d = 0; d < count; ++d) {
    auto worker = UcxWorker::Create("daemon-" + std::to_string(d));
    EXPECT_TRUE(worker.ok()) << worker.status();
    daemons[d].worker = std::move(*worker);
    daemons[d].worker->SetInterrupt(interrupt);
    daemons[d].buffers = std::make_unique<BufferMap>(testing::TensorsOf(sources));
    for (auto [spec, role] : {std::make_pair(&sources, v1::ROLE_SOURCE),
                              std::make_pair(&destinations, v1::ROLE_DESTINATION)}) {
      for (const v1::RankLayout& r : spec->ranks()) {
        if (*placement.DaemonOf(role, r.rank()) == d) {
          EXPECT_TRUE(daemons[d].buffers->AddRank(role, r).ok());
        }
      }
    }
  }
  std::vector<std::thread> threads;
  for (int32_t d = 0; d < count; ++d) {
    if (d == missing_daemon) continue;
    threads.emplace_back([&, d]() {
      std::vector<std::unique_ptr<UcxEndpoint>> endpoints(count);
      std::vector<UcxEndpoint*> peers(count, nullptr);
      for (int32_t p = 0; p < count; ++p) {
        if (p == d) continue;
        auto endpoint = daemons[d].worker->Connect(daemons[p].worker->address());
        ASSERT_TRUE(endpoint.ok()) << endpoint.status();
        endpoints[p] = std::move(*endpoint);
        peers[p] = endpoints[p].get();
      }
      PlanExecutor executor(daemons[d].buffers.get(), placement, d, daemons[d].worker.get(), peers);
      executor.SetInterrupt(interrupt);
      // Well past the deadline, so that a missing peer ends the run at the deadline (not
      // at the stall limit, whichever a loaded machine checks first), while the wait for a
      // missing writer's word that it stopped writing still ends soon after.
      executor.SetStallLimit(3 * timeout);
      executor.UseHostStaging(&daemons[d].staging);
      executor.HashPieces(true);
      executor.SetMessageChunkBytes(chunk_bytes);
      if (sharing != Sharing::kNone) {
        std::set<int32_t> others;
        for (int32_t p = 0; p < count; ++p) {
          if (p != d) others.insert(p);
        }
        executor.UseSharedMemory(others, &daemons[d].outbox, &daemons[d].inboxes);
      }
      if (sharing == Sharing::kStraight) {
        PeerDestinations& peers = daemons[d].peer_destinations;
        ASSERT_TRUE(peers.Update(destinations, placement, d).ok());
        executor.WriteStraightInto(peers.ranks(), peers.buffers());
      }
      if (before_run && !before_run(d, &executor, daemons[d].worker.get())) {
        daemons[d].result = absl::AbortedError("not run");
        return;
      }
      for (int run = 0; run < runs; ++run) {
        daemons[d].result = executor.Run(plan, epoch + run, absl::Now() + timeout);
        if (!daemons[d].result.ok()) break;
      }
      if (after_run) after_run(d);
    });
  }
  for (std::thread& t : threads) t.join();
  std::vector<absl::StatusOr<ExecutionStats>> results;
  for (Daemon& d : daemons) {
    results.push_back(d.result);
    if (staging_allocations != nullptr) staging_allocations->push_back(d.staging.allocations());
    if (staging_held_bytes != nullptr) staging_held_bytes->push_back(d.staging.HeldBytes(-1));
    if (outbox_allocations != nullptr) outbox_allocations->push_back(d.outbox.allocations());
  }
  return results;
}

// Each hash a daemon took on the way (packing, copying, unpacking) equals the hash of the
// box it names as that view holds it after the run; with `every_view_end` (reshard plans:
// every transfer is view to view), every view end of every transfer was hashed by its
// daemon.
void ExpectPieceHashesOfWhatMoved(const v1::Plan& plan, const RankPlacement& placement,
                                  const BufferMap& everything,
                                  const std::vector<absl::StatusOr<ExecutionStats>>& results,
                                  bool every_view_end) {
  int64_t checked = 0;
  for (const v1::Batch& batch : plan.batches()) {
    for (const v1::Transfer& t : batch.transfers()) {
      for (const bool destination : {false, true}) {
        const v1::Endpoint& end = destination ? t.dst() : t.src();
        if (!IsViewEndpoint(end)) {
          continue;
        }
        const v1::Role role = EndpointRole(end.kind());
        const PieceHashes* taken = &results[*placement.DaemonOf(role, end.rank())]->piece_hashes;
        // A piece written straight into a same-host peer's rank is hashed by its writer.
        if (destination && taken->written_by_peers.count(t.sequence())) {
          taken = &results[*placement.DaemonOf(EndpointRole(t.src().kind()), t.src().rank())]
                       ->piece_hashes;
        }
        const std::map<int64_t, uint64_t>& hashes =
            destination ? taken->at_destination : taken->at_source;
        auto hash = hashes.find(t.sequence());
        if (hash == hashes.end()) {
          EXPECT_FALSE(every_view_end) << "transfer " << t.sequence() << "'s "
                                       << (destination ? "destination" : "source") << " end";
          continue;
        }
        const Dims offset(t.offset().begin(), t.offset().end());
        const Dims extent(t.extent().begin(), t.extent().end());
        absl::StatusOr<ConstStridedRef> box =
            everything.Locate(role, end.rank(), end.view(), t.tensor(), offset, extent);
        ASSERT_TRUE(box.ok()) << box.status();
        EXPECT_EQ(hash->second,
                  HashBox(extent, everything.tensors().at(t.tensor()).element_bytes, *box))
            << "transfer " << t.sequence() << " of " << t.tensor();
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 0);
}

TEST(PlanExecutorTest, RandomLayoutsAcrossDaemonsArriveByteForByte) {
  std::mt19937_64 rng(2024);
  for (int trial = 0; trial < 24; ++trial) {
    const refit::testing::LayoutPair pair = refit::testing::RandomLayoutPair(rng, {});
    const int32_t count = 2 + trial % 2;
    SCOPED_TRACE(::testing::Message()
                 << "trial " << trial << " on " << count << " daemons: " << pair.description);
    for (const char* strategy : {planner::kStrategyReshard, planner::kStrategyGatherBroadcast}) {
      testing::BackedLayouts backed;
      const v1::LayoutSpec sources = backed.Back(pair.sources, "source");
      const v1::LayoutSpec destinations = backed.Back(pair.destinations, "destination");
      BufferMap everything(testing::TensorsOf(sources));
      ASSERT_NO_FATAL_FAILURE(AddEveryRank(sources, destinations, &everything));
      planner::PlanOptions options;
      options.strategy = strategy;
      options.staging_budget_bytes = 4096;  // several batches
      const planner::Layout src = *planner::CompileLayout(pair.sources, "source");
      const planner::Layout dst = *planner::CompileLayout(pair.destinations, "destination");
      auto plan = planner::BuildPlan(src, dst, planner::DgxH100Topology(), options);
      ASSERT_TRUE(plan.ok()) << plan.status();
      const RankPlacement placement = PlaceByHost(sources, destinations, count);
      const v1::Plan plan_proto = planner::PlanToProto(**plan, src, dst);
      // Odd trials cut messages into chunks smaller than most pieces: many rounds; pairs of
      // trials take turns at no shared memory, chunks through it, and also straight writes.
      const Sharing sharing = static_cast<Sharing>((trial / 2) % 3);
      const auto results = RunOnDaemons(
          plan_proto, sources, destinations, placement, count, trial, absl::Seconds(30),
          /*missing_daemon=*/-1, /*interrupt=*/nullptr, /*runs=*/1, /*staging_allocations=*/nullptr,
          trial % 2 == 1 ? 300 : PlanExecutor::kDefaultMessageChunkBytes,
          /*staging_held_bytes=*/nullptr, sharing);
      for (int32_t d = 0; d < count; ++d) {
        ASSERT_TRUE(results[d].ok()) << strategy << ", daemon " << d << ": " << results[d].status();
      }
      // What each daemon says it sent to a peer, the peer says it received.
      int64_t crossing = 0, via_shared_memory = 0;
      for (int32_t d = 0; d < count; ++d) {
        for (const auto& [to, bytes] : results[d]->bytes_sent_to) crossing += 2 * bytes;
        via_shared_memory += results[d]->bytes_via_shared_memory;
      }
      // Ordered plans (gather_broadcast) send piece by piece over UCX, never in chunks.
      const bool chunked = strategy == planner::kStrategyReshard;
      EXPECT_EQ(via_shared_memory, sharing != Sharing::kNone && chunked ? crossing : 0) << strategy;
      for (int32_t from = 0; from < count; ++from) {
        for (int32_t to = 0; to < count; ++to) {
          auto sent = results[from]->bytes_sent_to.find(to);
          auto received = results[to]->bytes_received_from.find(from);
          EXPECT_EQ(sent == results[from]->bytes_sent_to.end() ? 0 : sent->second,
                    received == results[to]->bytes_received_from.end() ? 0 : received->second)
              << strategy << ": daemon " << from << " to " << to;
        }
      }
      for (const v1::RankLayout& r : destinations.ranks()) {
        ASSERT_EQ(testing::WrongBytes(everything, v1::ROLE_DESTINATION, r), 0)
            << strategy << ": destination rank " << r.rank();
      }
      ExpectPieceHashesOfWhatMoved(plan_proto, placement, everything, results,
                                   /*every_view_end=*/strategy == planner::kStrategyReshard);
    }
  }
}

// A trainer host's layout to an inference host's: two daemons, one plan. By default one
// replicated tensor.
struct TwoHostRefit {
  TwoHostRefit() : TwoHostRefit(OneTensor("trainer"), OneTensor("inference")) {}
  TwoHostRefit(const refit::testing::LayoutBuilder& src_builder,
               const refit::testing::LayoutBuilder& dst_builder,
               const planner::PlanOptions& options = planner::PlanOptions()) {
    sources = backed.Back(src_builder.spec(), "source");
    destinations = backed.Back(dst_builder.spec(), "destination");
    const planner::Layout src = *planner::CompileLayout(src_builder.spec(), "source");
    const planner::Layout dst = *planner::CompileLayout(dst_builder.spec(), "destination");
    auto built = planner::BuildPlan(src, dst, planner::DgxH100Topology(), options);
    EXPECT_TRUE(built.ok()) << built.status();
    plan = planner::PlanToProto(**built, src, dst);
    placement = PlaceByHost(sources, destinations, 2);
  }
  static refit::testing::LayoutBuilder OneTensor(const std::string& host) {
    refit::testing::LayoutBuilder builder;
    builder.Tensor("w", {64, 64}).Rank(0, host, 0).Replicated("w", {0});
    return builder;
  }
  testing::BackedLayouts backed;
  v1::LayoutSpec sources, destinations;
  v1::Plan plan;
  RankPlacement placement;
};

TEST(PlanExecutorTest, HostStagingIsAllocatedOnceAndKeptAcrossEpochs) {
  const TwoHostRefit refit;
  std::vector<int64_t> allocations;
  const auto results = RunOnDaemons(refit.plan, refit.sources, refit.destinations, refit.placement,
                                    2, 20, absl::Seconds(10), /*missing_daemon=*/-1,
                                    /*interrupt=*/nullptr, /*runs=*/3, &allocations);
  for (const auto& result : results) ASSERT_TRUE(result.ok()) << result.status();
  // Both daemons stage the one message (sent, received) in the first epoch's block only.
  EXPECT_EQ(allocations, (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(results[1]->bytes_received_from.at(0), 64 * 64 * 4);
}

// Three tensors from a trainer host to an inference host, in two batches of 16 and 24 KiB
// (the planner fills a batch from the largest piece down): each batch one message.
constexpr int64_t kLargestBatchBytes = 2 * 48 * 64 * 4;
TwoHostRefit SmallThenLargeBatch() {
  refit::testing::LayoutBuilder src_builder, dst_builder;
  for (refit::testing::LayoutBuilder* builder : {&src_builder, &dst_builder}) {
    builder->Tensor("b", {64, 64}).Tensor("c", {48, 64}).Tensor("d", {48, 64});
    builder->Rank(0, builder == &src_builder ? "trainer" : "inference", 0);
    builder->Replicated("b", {0}).Replicated("c", {0}).Replicated("d", {0});
  }
  planner::PlanOptions options;
  options.staging_budget_bytes = kLargestBatchBytes;
  return TwoHostRefit(src_builder, dst_builder, options);
}

int64_t BatchBytes(const v1::Batch& batch) {
  int64_t bytes = 0;
  for (const v1::Transfer& t : batch.transfers()) bytes += t.bytes();
  return bytes;
}

// Reserve grows the host staging and the outbox to the largest batch's need before the
// first epoch: no run allocates after it. Without it the first epoch allocates twice (the
// small batch's block, then the large one's).
TEST(PlanExecutorTest, ReservedStagingAndOutboxAreAllTheRunsTake) {
  const TwoHostRefit refit = SmallThenLargeBatch();
  ASSERT_EQ(refit.plan.batches_size(), 2);
  ASSERT_LT(BatchBytes(refit.plan.batches(0)), BatchBytes(refit.plan.batches(1)));
  ASSERT_EQ(BatchBytes(refit.plan.batches(1)), kLargestBatchBytes);
  for (const Sharing sharing : {Sharing::kNone, Sharing::kHandoff}) {
    for (const bool reserve : {false, true}) {
      SCOPED_TRACE(::testing::Message() << (sharing == Sharing::kNone ? "over UCX" : "handed over")
                                        << (reserve ? ", reserved" : ""));
      std::vector<int64_t> staging, held, outbox;
      std::vector<absl::Status> reserved(2);
      const auto results = RunOnDaemons(
          refit.plan, refit.sources, refit.destinations, refit.placement, 2, 60, absl::Seconds(10),
          /*missing_daemon=*/-1, /*interrupt=*/nullptr, /*runs=*/2, &staging,
          PlanExecutor::kDefaultMessageChunkBytes, &held, sharing, &outbox,
          [&](int32_t d, PlanExecutor* executor, UcxWorker*) {
            if (reserve) reserved[d] = executor->Reserve(refit.plan);
            return reserved[d].ok();
          });
      for (int32_t d = 0; d < 2; ++d) {
        ASSERT_TRUE(reserved[d].ok()) << reserved[d];
        ASSERT_TRUE(results[d].ok()) << results[d].status();
      }
      const int64_t allocations = reserve ? 1 : 2;
      const int64_t largest = StagingPool::AlignUp(kLargestBatchBytes);
      if (sharing == Sharing::kNone) {
        EXPECT_EQ(staging, (std::vector<int64_t>{allocations, allocations}));
        EXPECT_EQ(held, (std::vector<int64_t>{largest, largest}));
      } else {
        EXPECT_EQ(staging, (std::vector<int64_t>{0, 0}));
        EXPECT_EQ(outbox, (std::vector<int64_t>{allocations, 0}));
      }
      EXPECT_EQ(results[1]->bytes_received_from.at(0), (64 + 48 + 48) * 64 * 4);
    }
  }
}

// Rows on four trainer ranks, columns on two inference ranks: eight 2 KiB pieces cross in
// one batch.
struct RowsToColumns {
  void Build() {
    refit::testing::LayoutBuilder src_builder, dst_builder;
    src_builder.Tensor("w", {64, 64}).Chunked("w", 0, {0, 1, 2, 3});
    dst_builder.Tensor("w", {64, 64}).Chunked("w", 1, {0, 1});
    for (int64_t r : {0, 1, 2, 3}) src_builder.Rank(r, "trainer");
    for (int64_t r : {0, 1}) dst_builder.Rank(r, "inference");
    sources = backed.Back(src_builder.spec(), "source");
    destinations = backed.Back(dst_builder.spec(), "destination");
    everything = std::make_unique<BufferMap>(testing::TensorsOf(sources));
    ASSERT_NO_FATAL_FAILURE(AddEveryRank(sources, destinations, everything.get()));
    const planner::Layout src = *planner::CompileLayout(src_builder.spec(), "source");
    const planner::Layout dst = *planner::CompileLayout(dst_builder.spec(), "destination");
    auto built = planner::BuildPlan(src, dst, planner::DgxH100Topology(), planner::PlanOptions());
    ASSERT_TRUE(built.ok()) << built.status();
    plan = planner::PlanToProto(**built, src, dst);
  }
  testing::BackedLayouts backed;
  v1::LayoutSpec sources, destinations;
  std::unique_ptr<BufferMap> everything;
  v1::Plan plan;
};

// Cut into chunks of one piece, RowsToColumns's pieces go in eight rounds through two
// slots, so each daemon stages two pieces, not the batch.
TEST(PlanExecutorTest, MessagesGoInChunksThroughTwoSlotsPerPeer) {
  RowsToColumns refit;
  ASSERT_NO_FATAL_FAILURE(refit.Build());
  const v1::LayoutSpec& sources = refit.sources;
  const v1::LayoutSpec& destinations = refit.destinations;
  const BufferMap& everything = *refit.everything;
  const v1::Plan& plan = refit.plan;
  ASSERT_EQ(plan.batches_size(), 1);
  ASSERT_EQ(plan.batches(0).transfers_size(), 8);
  constexpr int64_t kPieceBytes = 16 * 32 * 4;
  std::vector<int64_t> held;
  const auto results =
      RunOnDaemons(plan, sources, destinations, PlaceByHost(sources, destinations, 2), 2, 30,
                   absl::Seconds(10), /*missing_daemon=*/-1, /*interrupt=*/nullptr, /*runs=*/2,
                   /*staging_allocations=*/nullptr, /*chunk_bytes=*/kPieceBytes, &held);
  for (const auto& result : results) ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(results[1]->bytes_received_from.at(0), 8 * kPieceBytes);
  EXPECT_EQ(held, (std::vector<int64_t>{2 * kPieceBytes, 2 * kPieceBytes}));
  for (const v1::RankLayout& r : destinations.ranks()) {
    EXPECT_EQ(testing::WrongBytes(everything, v1::ROLE_DESTINATION, r), 0) << r.rank();
  }
}

TEST(PlanExecutorTest, ChunksBetweenDaemonsOfOneHostGoThroughSharedMemory) {
  RowsToColumns refit;
  ASSERT_NO_FATAL_FAILURE(refit.Build());
  const v1::LayoutSpec& sources = refit.sources;
  const v1::LayoutSpec& destinations = refit.destinations;
  const BufferMap& everything = *refit.everything;
  const v1::Plan& plan = refit.plan;
  ASSERT_EQ(plan.batches(0).transfers_size(), 8);
  constexpr int64_t kPieceBytes = 16 * 32 * 4;
  // One piece per chunk, three epochs: eight rounds each, the outbox's two slots reused
  // only after the receiver's receipt, and allocated once.
  std::vector<int64_t> held, outbox_allocations;
  const auto results =
      RunOnDaemons(plan, sources, destinations, PlaceByHost(sources, destinations, 2), 2, 40,
                   absl::Seconds(10), /*missing_daemon=*/-1, /*interrupt=*/nullptr, /*runs=*/3,
                   /*staging_allocations=*/nullptr, /*chunk_bytes=*/kPieceBytes, &held,
                   Sharing::kHandoff, &outbox_allocations);
  for (const auto& result : results) ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(results[0]->bytes_sent_to.at(1), 8 * kPieceBytes);
  EXPECT_EQ(results[1]->bytes_received_from.at(0), 8 * kPieceBytes);
  EXPECT_EQ(results[0]->bytes_via_shared_memory, 8 * kPieceBytes);
  EXPECT_EQ(results[1]->bytes_via_shared_memory, 8 * kPieceBytes);
  EXPECT_EQ(held, (std::vector<int64_t>{0, 0})) << "no host staging: the outbox is the staging";
  EXPECT_EQ(outbox_allocations, (std::vector<int64_t>{1, 0}));
  for (const v1::RankLayout& r : destinations.ranks()) {
    EXPECT_EQ(testing::WrongBytes(everything, v1::ROLE_DESTINATION, r), 0) << r.rank();
  }
}

TEST(PlanExecutorTest, ASenderThroughSharedMemoryWaitsForTheReceiversReceipt) {
  const TwoHostRefit refit;
  const absl::Time start = absl::Now();
  // The inference daemon (1) never runs: no receipt comes, so the trainer's daemon must
  // not finish (its outbox could still be read) and gives up at the deadline.
  const auto results =
      RunOnDaemons(refit.plan, refit.sources, refit.destinations, refit.placement, 2, 9,
                   absl::Milliseconds(300), /*missing=*/1, /*interrupt=*/nullptr, /*runs=*/1,
                   /*staging_allocations=*/nullptr, PlanExecutor::kDefaultMessageChunkBytes,
                   /*staging_held_bytes=*/nullptr, Sharing::kHandoff);
  EXPECT_EQ(results[0].status().code(), absl::StatusCode::kDeadlineExceeded) << results[0].status();
  // Stuck on the notice (the peer never progressed to take it) or on its receipt.
  EXPECT_NE(results[0].status().message().find("through shared memory"), std::string::npos)
      << results[0].status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST(PlanExecutorTest, PiecesBetweenDaemonsOfOneHostAreWrittenStraightIntoTheDestination) {
  RowsToColumns refit;
  ASSERT_NO_FATAL_FAILURE(refit.Build());
  ASSERT_EQ(refit.plan.batches(0).transfers_size(), 8);
  constexpr int64_t kPieceBytes = 16 * 32 * 4;
  // Three epochs: one copy per piece from the trainer's source views into the inference
  // ranks' memory, by the trainer's daemon; no staging, no outbox, no chunk on the wire.
  std::vector<int64_t> held, outbox_allocations;
  const auto results =
      RunOnDaemons(refit.plan, refit.sources, refit.destinations,
                   PlaceByHost(refit.sources, refit.destinations, 2), 2, 50, absl::Seconds(10),
                   /*missing_daemon=*/-1, /*interrupt=*/nullptr, /*runs=*/3,
                   /*staging_allocations=*/nullptr, /*chunk_bytes=*/kPieceBytes, &held,
                   Sharing::kStraight, &outbox_allocations);
  for (const auto& result : results) ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(results[0]->bytes_sent_to.at(1), 8 * kPieceBytes);
  EXPECT_EQ(results[1]->bytes_received_from.at(0), 8 * kPieceBytes);
  EXPECT_EQ(results[0]->delivered_bytes, 8 * kPieceBytes) << "the writer delivers them";
  EXPECT_EQ(results[1]->delivered_bytes, 0);
  EXPECT_EQ(held, (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(outbox_allocations, (std::vector<int64_t>{0, 0}));
  // Both ends of every piece hashed by the writer; the receiver hashes none.
  EXPECT_EQ(results[0]->piece_hashes.at_source.size(), 8u);
  EXPECT_EQ(results[0]->piece_hashes.at_destination.size(), 8u);
  EXPECT_EQ(results[1]->piece_hashes.written_by_peers.size(), 8u);
  EXPECT_TRUE(results[1]->piece_hashes.at_destination.empty());
  for (const v1::RankLayout& r : refit.destinations.ranks()) {
    EXPECT_EQ(testing::WrongBytes(*refit.everything, v1::ROLE_DESTINATION, r), 0) << r.rank();
  }
  ExpectPieceHashesOfWhatMoved(refit.plan, PlaceByHost(refit.sources, refit.destinations, 2),
                               *refit.everything, results, /*every_view_end=*/true);
}

TEST(PlanExecutorTest, AReplicaForwardedToADaemonOfTheSameHostIsWrittenStraight) {
  constexpr int kReplicas = 4;
  // One trainer rank, four inference replicas on four hosts (NVLink domains): the planner
  // sends w out of the trainer host once and forwards it from replica to replica in later
  // batches. With every daemon on one machine, a forwarded piece is copied by the daemon of
  // the replica it is read from straight into the next one's rank, as pieces from source
  // views are.
  refit::testing::LayoutBuilder src_builder, dst_builder;
  src_builder.Tensor("w", {2048, 2048}).Rank(0, "trainer", 0).Replicated("w", {0});
  dst_builder.Tensor("w", {2048, 2048});
  for (int r = 0; r < kReplicas; ++r) {
    dst_builder.Rank(r, absl::StrCat("inference-", r), 0).Replicated("w", {r});
  }
  testing::BackedLayouts backed;
  const v1::LayoutSpec sources = backed.Back(src_builder.spec(), "source");
  const v1::LayoutSpec destinations = backed.Back(dst_builder.spec(), "destination");
  BufferMap everything(testing::TensorsOf(sources));
  ASSERT_NO_FATAL_FAILURE(AddEveryRank(sources, destinations, &everything));
  const planner::Layout src = *planner::CompileLayout(src_builder.spec(), "source");
  const planner::Layout dst = *planner::CompileLayout(dst_builder.spec(), "destination");
  auto built = planner::BuildPlan(src, dst, planner::DgxH100Topology(), planner::PlanOptions());
  ASSERT_TRUE(built.ok()) << built.status();
  const v1::Plan plan = planner::PlanToProto(**built, src, dst);
  const RankPlacement placement = PlaceByHost(sources, destinations, kReplicas + 1);
  std::vector<int64_t> forwarded;  // sequences of pieces read from a destination view
  for (const v1::Batch& batch : plan.batches()) {
    for (const v1::Transfer& t : batch.transfers()) {
      if (t.src().kind() == v1::ENDPOINT_DESTINATION_VIEW) forwarded.push_back(t.sequence());
    }
  }
  ASSERT_FALSE(forwarded.empty()) << "the plan forwards nothing";
  std::vector<int64_t> outbox_allocations;
  const auto results =
      RunOnDaemons(plan, sources, destinations, placement, kReplicas + 1, 70, absl::Seconds(10),
                   /*missing_daemon=*/-1,
                   /*interrupt=*/nullptr, /*runs=*/2, /*staging_allocations=*/nullptr,
                   PlanExecutor::kDefaultMessageChunkBytes, /*staging_held_bytes=*/nullptr,
                   Sharing::kStraight, &outbox_allocations);
  for (const auto& result : results) ASSERT_TRUE(result.ok()) << result.status();
  std::map<std::pair<int32_t, int32_t>, int64_t> forwarded_bytes;  // (from, to) daemons
  for (const v1::Batch& batch : plan.batches()) {
    for (const v1::Transfer& t : batch.transfers()) {
      if (t.src().kind() != v1::ENDPOINT_DESTINATION_VIEW) continue;
      const int32_t to = *placement.DaemonOf(v1::ROLE_DESTINATION, t.dst().rank());
      const int32_t from = *placement.DaemonOf(v1::ROLE_DESTINATION, t.src().rank());
      ASSERT_NE(from, to);
      EXPECT_EQ(results[to]->piece_hashes.written_by_peers.count(t.sequence()), 1u)
          << "forwarded piece " << t.sequence() << " was not left to its writer";
      forwarded_bytes[{from, to}] += t.bytes();
    }
  }
  // An inference daemon sends only what it forwards, all of it written straight.
  for (const auto& [pair, bytes] : forwarded_bytes) {
    const auto [from, to] = pair;
    EXPECT_EQ(results[from]->bytes_sent_to.at(to), bytes) << from << " to " << to;
    EXPECT_EQ(results[to]->bytes_received_from.at(from), bytes) << from << " to " << to;
  }
  EXPECT_EQ(outbox_allocations, std::vector<int64_t>(kReplicas + 1, 0)) << "nothing handed over";
  for (const v1::RankLayout& r : destinations.ranks()) {
    EXPECT_EQ(testing::WrongBytes(everything, v1::ROLE_DESTINATION, r), 0) << r.rank();
  }
  ExpectPieceHashesOfWhatMoved(plan, placement, everything, results, /*every_view_end=*/true);
}

TEST(PlanExecutorTest, ADaemonWrittenStraightIntoWaitsForTheWritersWord) {
  const TwoHostRefit refit;
  const absl::Time start = absl::Now();
  // The trainer's daemon (0) never runs: the inference daemon must not end the batch (a
  // later one may read what the writer was to write), gives up at the deadline, and waits
  // no longer than the stall limit (here three timeouts) for the writer's word that it
  // stopped.
  const auto results =
      RunOnDaemons(refit.plan, refit.sources, refit.destinations, refit.placement, 2, 11,
                   absl::Milliseconds(300), /*missing=*/0, /*interrupt=*/nullptr, /*runs=*/1,
                   /*staging_allocations=*/nullptr, PlanExecutor::kDefaultMessageChunkBytes,
                   /*staging_held_bytes=*/nullptr, Sharing::kStraight);
  EXPECT_EQ(results[1].status().code(), absl::StatusCode::kDeadlineExceeded) << results[1].status();
  EXPECT_NE(results[1].status().message().find("bytes straight into ranks here"), std::string::npos)
      << results[1].status();
  EXPECT_NE(results[1].status().message().find(
                "daemon 0 did not say within 900ms that it stopped writing straight into ranks"),
            std::string::npos)
      << results[1].status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST(PlanExecutorTest, AnInterruptedDaemonReturnsOnlyOnceItsSameHostWriterStopped) {
  RowsToColumns refit;
  ASSERT_NO_FATAL_FAILURE(refit.Build());
  // The inference daemon (1) is interrupted from the start (its epoch was aborted); the
  // trainer's daemon (0), which writes every piece straight into the inference ranks, starts
  // late and is not. The inference daemon's run must not return while those writes may
  // still come (its ranks are marked partial then, and the next epoch may start): when it
  // returns, every piece is in.
  Interrupt aborted;
  aborted.Raise("the coordinator aborted the epoch");
  bool written_when_it_returned = false;
  const absl::Time start = absl::Now();
  absl::Duration returned_after;
  const auto results = RunOnDaemons(
      refit.plan, refit.sources, refit.destinations,
      PlaceByHost(refit.sources, refit.destinations, 2), 2, 60, absl::Seconds(10),
      /*missing_daemon=*/-1, /*interrupt=*/nullptr, /*runs=*/1, /*staging_allocations=*/nullptr,
      PlanExecutor::kDefaultMessageChunkBytes, /*staging_held_bytes=*/nullptr, Sharing::kStraight,
      /*outbox_allocations=*/nullptr,
      [&](int32_t d, PlanExecutor* executor, UcxWorker* worker) {
        if (d == 1) {
          executor->SetInterrupt(&aborted);
          worker->SetInterrupt(&aborted);
        } else {
          absl::SleepFor(absl::Milliseconds(300));
        }
        return true;
      },
      [&](int32_t d) {
        if (d != 1) return;
        returned_after = absl::Now() - start;
        written_when_it_returned = true;
        for (const v1::RankLayout& r : refit.destinations.ranks()) {
          if (testing::WrongBytes(*refit.everything, v1::ROLE_DESTINATION, r) != 0) {
            written_when_it_returned = false;
          }
        }
      });
  EXPECT_EQ(results[1].status().code(), absl::StatusCode::kCancelled) << results[1].status();
  ASSERT_TRUE(results[0].ok()) << results[0].status();
  EXPECT_TRUE(written_when_it_returned);
  EXPECT_GE(returned_after, absl::Milliseconds(300));
  EXPECT_LT(returned_after, absl::Seconds(5));
}

TEST(PlanExecutorTest, AWriterThatFailedBeforeItsRunSaysItWillNotWriteAndIsNotWaitedFor) {
  const TwoHostRefit refit;
  // The trainer's daemon (0) fails before its data plane (a truncated segment, say): it
  // says so instead of running, and the coordinator aborts the inference daemon's epoch.
  // The inference daemon returns at once, not after the stall limit (30 s here) that it
  // waits for a writer that said nothing.
  Interrupt aborted;
  const absl::Time start = absl::Now();
  absl::Status said = absl::UnknownError("not said");
  const auto results = RunOnDaemons(
      refit.plan, refit.sources, refit.destinations, refit.placement, 2, 13, absl::Seconds(10),
      /*missing_daemon=*/-1, /*interrupt=*/nullptr, /*runs=*/1, /*staging_allocations=*/nullptr,
      PlanExecutor::kDefaultMessageChunkBytes, /*staging_held_bytes=*/nullptr, Sharing::kStraight,
      /*outbox_allocations=*/nullptr, [&](int32_t d, PlanExecutor* executor, UcxWorker* worker) {
        if (d == 1) {
          executor->SetInterrupt(&aborted);
          worker->SetInterrupt(&aborted);
          return true;
        }
        said = executor->SayNotWriting(refit.plan, 13);
        aborted.Raise("the coordinator aborted the epoch: daemon 0 could not run it");
        return false;
      });
  EXPECT_TRUE(said.ok()) << said;
  EXPECT_EQ(results[1].status().code(), absl::StatusCode::kCancelled) << results[1].status();
  EXPECT_EQ(results[1].status().message().find("did not say"), std::string::npos)
      << results[1].status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST(PlanExecutorTest, MorePiecesThanATagHasChunkNumbersForStillArriveWhole) {
  // 1,100 small tensors from one trainer to one inference rank: one batch of 1,100 pieces,
  // each a chunk of its own at a 1-byte chunk limit, more than the tag's 1,024 chunk
  // numbers. The limit must grow until the chunks fit, over UCX and through shared memory.
  refit::testing::LayoutBuilder src_builder, dst_builder;
  constexpr int kTensors = 1100;
  for (int i = 0; i < kTensors; ++i) {
    const std::string name = absl::StrCat("t", i);
    src_builder.Tensor(name, {4, 4}).Rank(0, "trainer", -1).Replicated(name, {0});
    dst_builder.Tensor(name, {4, 4}).Rank(0, "inference", -1).Replicated(name, {0});
  }
  const planner::Layout src = *planner::CompileLayout(src_builder.spec(), "source");
  const planner::Layout dst = *planner::CompileLayout(dst_builder.spec(), "destination");
  auto built = planner::BuildPlan(src, dst, planner::DgxH100Topology(), planner::PlanOptions());
  ASSERT_TRUE(built.ok()) << built.status();
  const v1::Plan plan = planner::PlanToProto(**built, src, dst);
  int64_t most_in_a_batch = 0;
  for (const v1::Batch& batch : plan.batches()) {
    most_in_a_batch = std::max<int64_t>(most_in_a_batch, batch.transfers_size());
  }
  ASSERT_GT(most_in_a_batch, 1024);  // the chunk numbers a tag has (kChunkBits)
  for (const Sharing sharing : {Sharing::kNone, Sharing::kHandoff}) {
    SCOPED_TRACE(sharing == Sharing::kNone ? "over UCX" : "through shared memory");
    testing::BackedLayouts backed;  // fresh, zeroed destination segments each time
    const v1::LayoutSpec sources = backed.Back(src_builder.spec(), "source");
    const v1::LayoutSpec destinations = backed.Back(dst_builder.spec(), "destination");
    BufferMap everything(testing::TensorsOf(sources));
    ASSERT_NO_FATAL_FAILURE(AddEveryRank(sources, destinations, &everything));
    const auto results =
        RunOnDaemons(plan, sources, destinations, PlaceByHost(sources, destinations, 2), 2, 3,
                     absl::Seconds(30), /*missing_daemon=*/-1,
                     /*interrupt=*/nullptr, /*runs=*/1,
                     /*staging_allocations=*/nullptr, /*chunk_bytes=*/1,
                     /*staging_held_bytes=*/nullptr, sharing);
    for (const auto& result : results) ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(results[1]->bytes_received_from.at(0), kTensors * 4 * 4 * 4);
    EXPECT_EQ(testing::WrongBytes(everything, v1::ROLE_DESTINATION, destinations.ranks(0)), 0);
  }
}

TEST(PlanExecutorTest, AMissingPeerEndsTheEpochAtItsDeadline) {
  const TwoHostRefit refit;
  const absl::Time start = absl::Now();
  // The trainer's daemon (0) never runs: the inference daemon must give up by itself.
  const auto results = RunOnDaemons(refit.plan, refit.sources, refit.destinations, refit.placement,
                                    2, 7, absl::Milliseconds(300), /*missing=*/0);
  EXPECT_EQ(results[1].status().code(), absl::StatusCode::kDeadlineExceeded) << results[1].status();
  EXPECT_NE(results[1].status().message().find("epoch 7: batch 0"), std::string::npos)
      << results[1].status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST(PlanExecutorTest, ATransferWithAnUnknownRouteIsRefusedNotCounted) {
  // A route number from the wire that no build knows: it must be refused by name, not
  // used to index the per-route byte counts.
  TwoHostRefit refit;
  refit.plan.mutable_batches(0)->mutable_transfers(0)->set_route(static_cast<v1::Route>(1000));
  const auto results = RunOnDaemons(refit.plan, refit.sources, refit.destinations, refit.placement,
                                    2, 8, absl::Seconds(5));
  for (const auto& result : results) {
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << result.status();
    EXPECT_NE(result.status().message().find("unknown route 1000"), std::string::npos)
        << result.status();
  }
}

TEST(PlanExecutorTest, AnInterruptEndsTheEpochAtOnce) {
  const TwoHostRefit refit;
  // The inference daemon waits for a peer that never sends, with a minute to spare; the
  // interrupt (what the coordinator's abort or SIGTERM sets) must end the wait at once.
  Interrupt interrupt;
  std::thread aborter([&]() {
    absl::SleepFor(absl::Milliseconds(200));
    interrupt.Raise("the coordinator aborted the epoch");
  });
  const absl::Time start = absl::Now();
  const auto results = RunOnDaemons(refit.plan, refit.sources, refit.destinations, refit.placement,
                                    2, 9, absl::Seconds(60), /*missing=*/0, &interrupt);
  aborter.join();
  EXPECT_EQ(results[1].status().code(), absl::StatusCode::kCancelled) << results[1].status();
  EXPECT_TRUE(absl::StrContains(results[1].status().message(), "the coordinator aborted the epoch"))
      << results[1].status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

// Relay buffers across daemons: the far trainer host's daemon sends most of w into relay
// buffers on the near trainer host's daemon, which forwards it to the inference daemon of
// its domain; each buffer is freed after it is forwarded.
TEST(PlanExecutorTest, RelayBuffersForwardAcrossDaemonsAndAreFreed) {
  const refit::testing::RelayBufferCase relay_case = refit::testing::MakeRelayBufferCase();
  testing::BackedLayouts backed;
  const v1::LayoutSpec sources = backed.Back(relay_case.sources.spec(), "source");
  const v1::LayoutSpec destinations = backed.Back(relay_case.destinations.spec(), "destination");
  BufferMap everything(testing::TensorsOf(sources));
  ASSERT_NO_FATAL_FAILURE(AddEveryRank(sources, destinations, &everything));
  planner::PlanOptions options;
  options.staging_budget_bytes = relay_case.staging_budget_bytes;
  const planner::Layout src = *planner::CompileLayout(relay_case.sources.spec(), "source");
  const planner::Layout dst =
      *planner::CompileLayout(relay_case.destinations.spec(), "destination");
  auto plan = planner::BuildPlan(src, dst, relay_case.topology, options);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const int64_t relayed = (*plan)->stats.relay_buffer_bytes;
  ASSERT_GT(relayed, 0);
  // Daemons by host: far 0, near 1, inference 2.
  const RankPlacement placement = PlaceByHost(sources, destinations, 3);
  ASSERT_EQ(*placement.DaemonOf(v1::ROLE_SOURCE, 4), 1);
  ASSERT_EQ(*placement.DaemonOf(v1::ROLE_DESTINATION, 0), 2);
  const auto results = RunOnDaemons(planner::PlanToProto(**plan, src, dst), sources, destinations,
                                    placement, 3, 11, absl::Seconds(30));
  for (int32_t d = 0; d < 3; ++d)
    ASSERT_TRUE(results[d].ok()) << "daemon " << d << ": " << results[d].status();
  for (const v1::RankLayout& r : destinations.ranks()) {
    ASSERT_EQ(testing::WrongBytes(everything, v1::ROLE_DESTINATION, r), 0);
  }
  // What entered the relay buffers came from the far daemon and went on to the inference
  // daemon (with v, which the near trainers hold themselves).
  const int64_t v_bytes = 8 * 8 * 4;
  EXPECT_EQ(results[0]->bytes_sent_to.at(1), relayed);
  EXPECT_EQ(results[1]->bytes_sent_to.at(2), relayed + v_bytes);
  EXPECT_EQ(results[0]->bytes_sent_to.at(2) + relayed, 1024 * 1024 * 4);
  // Only the near daemon held relay buffers, never more than its four GPUs' share of the
  // plan's peak, and none is left.
  EXPECT_EQ(results[0]->relay_buffer_peak_bytes, 0);
  EXPECT_EQ(results[2]->relay_buffer_peak_bytes, 0);
  EXPECT_GT(results[1]->relay_buffer_peak_bytes, 0);
  EXPECT_LE(results[1]->relay_buffer_peak_bytes, 4 * (*plan)->stats.relay_buffer_peak_bytes);
  EXPECT_LT(results[1]->relay_buffer_peak_bytes, relayed);
  EXPECT_EQ(results[1]->relay_buffers_left, 0);
  // They were laid out in one block per GPU, where later buffers took the places of
  // buffers already forwarded: the blocks hold the peak, and less than everything relayed.
  EXPECT_GE(results[1]->relay_buffer_block_bytes, results[1]->relay_buffer_peak_bytes);
  EXPECT_LT(results[1]->relay_buffer_block_bytes, relayed);
  EXPECT_EQ(results[0]->relay_buffer_block_bytes, 0);
}

}  // namespace
}  // namespace refit::transport

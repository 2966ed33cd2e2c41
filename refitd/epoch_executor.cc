#include "refitd/epoch_executor.h"

#include <algorithm>
#include <future>
#include <memory>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "refitd/epoch_faults.h"
#include "spdlog/spdlog.h"
#include "transport/peer_destinations.h"
#include "transport/piece_hashing.h"
#include "transport/plan_executor.h"
#include "transport/view_hashing.h"

namespace refit::daemon {
namespace {

std::vector<v1::QuantizedSource> QuantizedSourcesOf(const v1::PlanSlice& slice) {
  return {slice.quantized_sources().begin(), slice.quantized_sources().end()};
}

std::vector<v1::QuantizedSource> QuantizedOnArrivalOf(const v1::PlanSlice& slice) {
  return {slice.quantized_on_arrival().begin(), slice.quantized_on_arrival().end()};
}

// The views of the slice's ranks quantized before they are sent and after they arrive, in
// the memory `buffers` keeps for them.
absl::Status UseQuantized(const v1::PlanSlice& slice, transport::BufferMap* buffers) {
  absl::Status sent = buffers->SendQuantized(QuantizedSourcesOf(slice));
  absl::Status received = buffers->ReceiveQuantized(QuantizedOnArrivalOf(slice));
  return sent.ok() ? received : sent;
}

// Source views of at least this many bytes are hashed on a thread of their own while the
// data plane runs.
constexpr int64_t kViewBytesPerThread = 4 << 20;

// The destination ranks the slice places on its own daemon.
std::set<int64_t> DestinationsHere(const v1::PlanSlice& slice) {
  std::set<int64_t> here;
  for (const v1::RankPlacement& p : slice.placement()) {
    if (p.role() == v1::ROLE_DESTINATION && p.daemon() == slice.daemon_index()) {
      here.insert(p.rank());
    }
  }
  return here;
}

// The daemons the slice's transfers exchange pieces with (this one included).
std::set<int32_t> ExchangedWith(const v1::PlanSlice& slice,
                                const transport::RankPlacement& placement) {
  std::set<int32_t> daemons;
  for (const v1::Batch& batch : slice.plan().batches()) {
    for (const v1::Transfer& t : batch.transfers()) {
      for (const v1::Endpoint* end : {&t.src(), &t.dst()}) {
        absl::StatusOr<int32_t> daemon =
            placement.DaemonOf(transport::EndpointRole(end->kind()), end->rank());
        if (daemon.ok()) daemons.insert(*daemon);
      }
    }
  }
  return daemons;
}

}  // namespace

EpochExecutor::EpochExecutor(std::string node, RankRegistry* registry, DaemonMetrics* metrics,
                             const transport::Interrupt* interrupt,
                             const transport::Interrupt* stopping,
                             std::function<void(const std::string& address)> on_new_address)
    : node_(std::move(node)),
      registry_(registry),
      metrics_(metrics),
      interrupt_(interrupt),
      stopping_(stopping),
      data_plane_(node_, interrupt, std::move(on_new_address)),
      nccl_(node_, interrupt) {}

EpochExecutor::~EpochExecutor() {
  data_plane_.Drop();
  nccl_.Leave();
}

const EpochExecutor::SliceFacts& EpochExecutor::FactsOf(
    const std::shared_ptr<const v1::PlanSlice>& slice) {
  if (facts_.slice == slice) return facts_;
  facts_ = SliceFacts{slice};
  for (const v1::RankPlacement& p : slice->placement()) {
    facts_.placement.Place(p.role(), p.rank(), p.daemon());
    if (p.gpu()) facts_.placement.PlaceDevice(p.role(), p.rank(), p.device());
  }
  facts_.destinations_here = DestinationsHere(*slice);
  facts_.exchanged_with = ExchangedWith(*slice, facts_.placement);
  return facts_;
}

v1::EpochDone EpochExecutor::Run(const v1::ExecuteEpoch& execute,
                                 const std::shared_ptr<const v1::PlanSlice>& slice,
                                 const Progress& progress) {
  v1::EpochDone done;
  done.set_epoch_id(execute.epoch_id());
  if (slice == nullptr || slice->digest() != execute.plan_digest()) {
    done.set_code(static_cast<int32_t>(absl::StatusCode::kFailedPrecondition));
    done.set_error("no plan slice for this epoch's plan");
    spdlog::warn("refitd {}: epoch {} failed: {}", node_, execute.epoch_id(), done.error());
    if (metrics_ != nullptr) metrics_->EpochDone(false);
    return done;
  }
  const SliceFacts& facts = FactsOf(slice);
  std::optional<RankRegistry::BufferHold> hold = registry_->BeginEpoch(facts.destinations_here);
  if (data_plane_.worker() != nullptr) {
    done = Execute(execute, facts, &hold->mutable_buffers(), progress);
    RecordKeptMemory();
  } else {
    done.set_epoch_id(execute.epoch_id());
    done.set_code(static_cast<int32_t>(absl::StatusCode::kUnavailable));
    done.set_error(absl::StrCat("refitd on ", node_,
                                " has no data plane (its UCX worker could not be made again)"));
  }
  // Before the buffers can be unmapped or reused: an operation left running could still
  // touch them. Closing every endpoint ends them (a receive runs on the endpoint back to
  // its sender, which is why a daemon holds one to every peer it receives from);
  // destroying the worker makes sure.
  data_plane_.DropIfUnsound(execute.epoch_id());
  hold.reset();  // nothing touches the buffers any more: ranks that left may go
  // Otherwise a failed epoch leaves the endpoints alone: one that broke says so and is
  // replaced at the next epoch, a peer that restarted or replaced its worker has a new
  // address, and closing a healthy endpoint this daemon never sent on would make UCX drop
  // what the peer sends next (see ucx_worker.h).
  if (metrics_ != nullptr) metrics_->EpochDone(done.ok());
  return done;
}

absl::Status EpochExecutor::UseKeptMemory(const v1::PlanSlice& slice,
                                          const transport::RankPlacement& placement,
                                          transport::PlanExecutor* executor) {
  executor->UseHostStaging(&host_staging_);
  if (shared_memory_domain_.empty()) return absl::OkStatus();
  std::set<int32_t> same_host;
  for (const v1::DaemonPeer& peer : slice.daemons()) {
    if (peer.index() != slice.daemon_index() &&
        peer.shared_memory_domain() == shared_memory_domain_) {
      same_host.insert(peer.index());
    }
  }
  if (same_host.empty()) return absl::OkStatus();
  executor->UseSharedMemory(same_host, &outbox_, &inboxes_);
  // Pieces from this daemon's source views into those peers' destination ranks in shared
  // memory are written straight into them.
  if (absl::Status mapped =
          peer_destinations_.Update(slice.shared_destinations(), placement, slice.daemon_index());
      !mapped.ok()) {
    // As listed, so that the peers hear that this daemon will not write into them.
    executor->WriteStraightInto(transport::PeerDestinations::Listed(slice.shared_destinations()),
                                peer_destinations_.buffers());
    return mapped;
  }
  executor->WriteStraightInto(peer_destinations_.ranks(), peer_destinations_.buffers());
  return absl::OkStatus();
}

absl::Status EpochExecutor::Prepare(const std::shared_ptr<const v1::PlanSlice>& slice) {
  if (slice == nullptr || slice == prepared_) return absl::OkStatus();
  if (data_plane_.worker() == nullptr) {
    return absl::UnavailableError("this refitd has no data-plane (UCX) worker yet");
  }
  prepared_ = slice;
  const absl::Time start = absl::Now();
  OnPrepare(node_);
  const SliceFacts& facts = FactsOf(slice);
  absl::Status ready;
  absl::StatusOr<std::vector<transport::UcxEndpoint*>> peers =
      data_plane_.PeersFor(*slice, facts.exchanged_with);
  if (!peers.ok()) {
    ready = peers.status();
  } else {
    RankRegistry::BufferHold hold = registry_->HoldBuffers();
    transport::PlanExecutor executor(&hold.mutable_buffers(), facts.placement,
                                     slice->daemon_index(), data_plane_.worker(), *peers);
    // The views sent quantized first: the staging is sized in their codes and scales.
    ready = UseQuantized(*slice, &hold.mutable_buffers());
    if (ready.ok()) ready = UseKeptMemory(*slice, facts.placement, &executor);
    if (ready.ok()) ready = executor.Reserve(slice->plan());
    RecordQuantizedMemory(hold.buffers());
  }
  if (!ready.ok()) {
    spdlog::warn(
        "refitd {}: could not prepare for plan {} ahead of its epochs (the first "
        "epoch sets up what it needs): {}",
        node_, slice->digest(), std::string(ready.message()));
    return ready;
  }
  RecordKeptMemory();
  const int64_t connected =
      std::count_if(peers->begin(), peers->end(), [](auto* peer) { return peer != nullptr; });
  spdlog::info(
      "refitd {}: prepared for plan {} in {:.3f} s: {} peers connected, {:.1f} MB of host "
      "staging, {:.1f} MB of shared-memory outbox",
      node_, slice->digest(), absl::ToDoubleSeconds(absl::Now() - start), connected,
      host_staging_.HeldBytes(-1) / 1e6, outbox_.held_bytes() / 1e6);
  return absl::OkStatus();
}

absl::Status EpochExecutor::Quantize(v1::Role role, const v1::PlanSlice& slice,
                                     transport::BufferMap* buffers) {
  const bool sent = role == v1::ROLE_SOURCE;
  const int views = sent ? slice.quantized_sources_size() : slice.quantized_on_arrival_size();
  if (views == 0) return absl::OkStatus();
  const absl::Time start = absl::Now();
  RecordQuantizedMemory(*buffers);
  absl::StatusOr<int64_t> read =
      sent ? buffers->QuantizeSent(copy_threads_) : buffers->QuantizeReceived(copy_threads_);
  if (!read.ok()) return read.status();
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  if (metrics_ != nullptr) metrics_->Quantized(*read, seconds);
  spdlog::info("refitd {}: quantized {} {} views ({:.1f} MB) in {:.3f} s", node_, views,
               sent ? "source" : "received destination", *read / 1e6, seconds);
  return absl::OkStatus();
}

void EpochExecutor::RecordQuantizedMemory(const transport::BufferMap& buffers) {
  if (metrics_ == nullptr) return;
  metrics_->KeptMemory("quantized_sources", buffers.QuantizedBytes(v1::ROLE_SOURCE),
                       buffers.QuantizedAllocations(v1::ROLE_SOURCE));
  metrics_->KeptMemory("quantized_on_arrival", buffers.QuantizedBytes(v1::ROLE_DESTINATION),
                       buffers.QuantizedAllocations(v1::ROLE_DESTINATION));
}

void EpochExecutor::RecordKeptMemory() {
  if (metrics_ == nullptr) return;
  metrics_->KeptMemory("host_staging", host_staging_.HeldBytes(-1), host_staging_.allocations());
  metrics_->KeptMemory("shared_memory_outbox", outbox_.held_bytes(), outbox_.allocations());
}

v1::EpochDone EpochExecutor::FailBeforeRun(transport::PlanExecutor* executor, const v1::Plan& plan,
                                           uint32_t epoch_number, v1::EpochDone failed) {
  if (absl::Status said = executor->SayNotWriting(plan, epoch_number); !said.ok()) {
    spdlog::warn(
        "refitd {}: epoch {}: could not tell the same-host peers it writes into that "
        "it will not: {} (they wait for it up to the stall limit)",
        node_, failed.epoch_id(), std::string(said.message()));
  }
  return failed;
}

v1::EpochDone EpochExecutor::Execute(const v1::ExecuteEpoch& execute, const SliceFacts& facts,
                                     transport::BufferMap* buffers, const Progress& progress) {
  v1::EpochDone done;
  done.set_epoch_id(execute.epoch_id());
  const absl::Time start = absl::Now();
  const absl::Time deadline =
      start + absl::Milliseconds(std::max<int64_t>(1, execute.deadline_ms()));
  auto fail = [&](const absl::Status& status) {
    done.set_ok(false);
    done.set_code(static_cast<int32_t>(status.code()));
    for (int64_t rank : registry_->bucket_streams().StalledIn(execute.epoch_id())) {
      done.add_stalled_destination_ranks(rank);
    }
    done.set_error(absl::StrCat(
        stopping_->raised() ? "refitd is shutting down; the epoch was interrupted: " : "",
        status.message()));
    spdlog::warn("refitd {}: epoch {} failed after {:.3f} s: {}", node_, execute.epoch_id(),
                 absl::ToDoubleSeconds(absl::Now() - start), std::string(status.message()));
    return done;
  };
  const v1::PlanSlice& slice = *facts.slice;
  const transport::RankPlacement& placement = facts.placement;
  int64_t transfers = 0;
  for (const v1::Batch& batch : slice.plan().batches()) transfers += batch.transfers_size();
  spdlog::info("refitd {}: epoch {} (version {}) started: {} transfers in {} batches", node_,
               execute.epoch_id(), execute.version(), transfers, slice.plan().batches_size());
  // Connections only to the daemons this slice exchanges pieces with: a large group's
  // daemons would otherwise each hold an endpoint to every other. Receiving needs one
  // too: closing it is what ends a receive stuck behind a dead link.
  absl::StatusOr<std::vector<transport::UcxEndpoint*>> peers =
      data_plane_.PeersFor(slice, facts.exchanged_with);
  if (!peers.ok()) return fail(peers.status());
  transport::PlanExecutor executor(buffers, placement, slice.daemon_index(), data_plane_.worker(),
                                   *peers);
  // A link that died under the epoch, while both ends still reach the coordinator, ends
  // it within this bound rather than at its deadline.
  const absl::Duration stall_limit =
      absl::Milliseconds(execute.stall_ms() > 0 ? execute.stall_ms() : 10000);
  executor.SetStallLimit(stall_limit);
  executor.SetInterrupt(interrupt_);
  executor.SetCopyThreads(copy_threads_);
  // Source views the destinations hold quantized are read as their codes and scales from
  // here on (the memory kept across epochs; quantized below); destination views quantized on
  // arrival are written wide.
  if (absl::Status sent = UseQuantized(slice, buffers); !sent.ok()) {
    return FailBeforeRun(&executor, slice.plan(), execute.epoch_number(), fail(sent));
  }
  if (absl::Status kept = UseKeptMemory(slice, placement, &executor); !kept.ok()) {
    return FailBeforeRun(&executor, slice.plan(), execute.epoch_number(), fail(kept));
  }
  // A segment its owner truncated since registration would fault at the first touch.
  if (absl::Status backed = buffers->CheckBacked(); !backed.ok()) {
    return FailBeforeRun(&executor, slice.plan(), execute.epoch_number(), fail(backed));
  }
  // Views the destinations hold quantized: quantized now, from what the trainers published,
  // before any piece of them moves (and before their checksums are taken).
  if (absl::Status quantized = Quantize(v1::ROLE_SOURCE, slice, buffers); !quantized.ok()) {
    return FailBeforeRun(&executor, slice.plan(), execute.epoch_number(), fail(quantized));
  }
  transport::NcclRoute nccl;
  if (slice.has_nccl()) {
    if (absl::Status joined = nccl_.Join(slice, deadline, &nccl); !joined.ok()) {
      return FailBeforeRun(&executor, slice.plan(), execute.epoch_number(), fail(joined));
    }
  }
  if (nccl.group != nullptr) {
    executor.UseNccl(&nccl);
    executor.UseDeviceStaging(nccl_.device_staging());
  }
  // Bucketed destination ranks here: their pieces go through their buckets to their
  // processes, each bucket hashed on the way when the epoch checks its pieces.
  std::unique_ptr<transport::DestinationSink> buckets = registry_->bucket_streams().SinkFor(
      buffers, facts.destinations_here,
      // A process that stopped taking buckets is found before its senders' links count as
      // stalled, so the epoch's failure names its rank (and a replica drops it).
      BucketStreams::EpochContext{execute.epoch_id(), execute.version(), deadline, interrupt_,
                                  stall_limit / 2});
  executor.UseSink(buckets.get());
  executor.HashPieces(execute.checksums());
  executor.OnProgress(progress);
  executor.OnMessageReceived([&](uint8_t* message, int64_t bytes) {
    OnMessageReceived(node_, execute.epoch_id(), execute.version(), message, bytes);
  });
  // Source views do not change during an epoch: their checksums are taken on another
  // thread while the data plane runs, not after it. (The future waits in its destructor,
  // so the hashing ends before the buffers' hold does, also when the epoch fails.)
  // Only the views the coordinator compares (another view holds the same box).
  std::optional<transport::ViewKeySet> compared;
  if (slice.has_compared_views()) {
    compared.emplace();
    for (const v1::ViewKey& key : slice.compared_views().views()) {
      compared->emplace(key.role(), key.rank(), key.view());
    }
  }
  const transport::ViewKeySet* only = compared.has_value() ? &*compared : nullptr;
  // Where every piece is hashed (unordered plans), source views are hashed only to compare
  // the trainers' replicas with each other: a share of the tensors each epoch
  // (JobSpec.source_replica_check_epochs). Ordered plans compare every view every epoch.
  std::optional<transport::ViewKeySet> source_share;
  // An epoch that fails stops the hashing (the future's destructor waits for it).
  transport::Interrupt stop_hashing;
  std::future<absl::StatusOr<std::vector<v1::ViewChecksum>>> source_view_checksums;
  if (execute.checksums()) {
    std::vector<v1::RankRegistration> sources = RegistrationsOf(v1::ROLE_SOURCE);
    const transport::ViewKeySet* hashed = only;
    if (!slice.plan().ordered_batches() && execute.source_replica_check_epochs() > 1) {
      source_share = transport::SourceReplicaShare(sources, only, execute.epoch_number(),
                                                   execute.source_replica_check_epochs());
      hashed = &*source_share;
    }
    // A thread of its own pays for itself only with enough bytes to hash; a few small views
    // are hashed after the data plane (a thread per epoch costs more than they do).
    const std::launch launch =
        transport::ViewChecksumBytes(sources, *buffers, hashed) >= kViewBytesPerThread
            ? std::launch::async
            : std::launch::deferred;
    source_view_checksums =
        std::async(launch, [sources = std::move(sources), buffers, hashed, &stop_hashing] {
          return transport::ChecksumViews(sources, *buffers, hashed, &stop_hashing);
        });
  }
  absl::Cleanup stop_on_return = [&stop_hashing] { stop_hashing.Raise("the epoch ended"); };
  const absl::Time data_plane_start = absl::Now();
  absl::StatusOr<transport::ExecutionStats> stats =
      executor.Run(slice.plan(), execute.epoch_number(), deadline);
  const absl::Time data_plane_end = absl::Now();
  if (!stats.ok()) return fail(stats.status());
  RecordStats(execute.epoch_id(), slice, *stats);
  // Views whose blocks the source ranks cut arrived wide: their codes and scales now, into
  // the ranks' memory (a staged rank's shadow), before the epoch is done.
  if (absl::Status quantized = Quantize(v1::ROLE_DESTINATION, slice, buffers); !quantized.ok()) {
    return fail(quantized);
  }
  for (const auto& [rank, seconds] : stats->destination_finish_seconds) {
    v1::RankFinish* finish = done.add_finished();
    finish->set_rank(rank);
    finish->set_seconds(seconds);
  }
  if (execute.checksums()) {
    absl::StatusOr<std::vector<v1::ViewChecksum>> checksums = source_view_checksums.get();
    if (!checksums.ok()) return fail(checksums.status());
    // Where every destination byte arrives by a view-to-view piece (unordered plans), the
    // piece checksums cover the destination views; their view checksums would hash the
    // same bytes again. Ordered plans go through scratch buffers: there every view is hashed.
    if (slice.plan().ordered_batches()) {
      absl::StatusOr<std::vector<v1::ViewChecksum>> destination_checksums =
          transport::ChecksumViews(RegistrationsOf(v1::ROLE_DESTINATION), *buffers, only);
      if (!destination_checksums.ok()) return fail(destination_checksums.status());
      checksums->insert(checksums->end(), destination_checksums->begin(),
                        destination_checksums->end());
    }
    for (v1::ViewChecksum& c : *checksums) *done.add_checksums() = std::move(c);
    // Pieces hashed as they were packed, copied or unpacked keep those hashes.
    absl::StatusOr<std::vector<v1::PieceChecksum>> pieces = transport::ChecksumPieces(
        slice.plan(), placement, slice.daemon_index(), *buffers, &stats->piece_hashes);
    if (!pieces.ok()) return fail(pieces.status());
    for (v1::PieceChecksum& p : *pieces) *done.add_pieces() = std::move(p);
  }
  done.set_seconds(absl::ToDoubleSeconds(absl::Now() - start));
  spdlog::info(
      "refitd {}: epoch {} done: {} transfers, {} bytes ({} through shared memory) in {:.3f} s "
      "(setup {:.3f} s, data plane {:.3f} s, checksums {:.3f} s)",
      node_, execute.epoch_id(), stats->transfers, stats->bytes, stats->bytes_via_shared_memory,
      done.seconds(), absl::ToDoubleSeconds(data_plane_start - start),
      absl::ToDoubleSeconds(data_plane_end - data_plane_start),
      absl::ToDoubleSeconds(absl::Now() - data_plane_end));
  done.set_ok(true);
  return done;
}

void EpochExecutor::MapPeerDestinations(const v1::LayoutSpec& ranks) {
  if (shared_memory_domain_.empty()) return;
  const absl::Time start = absl::Now();
  const int64_t mapped_before = peer_destinations_.mappings();
  if (absl::Status prepared = peer_destinations_.Prepare(ranks); !prepared.ok()) {
    spdlog::warn("refitd {}: {}", node_, std::string(prepared.message()));
  }
  if (peer_destinations_.mappings() > mapped_before) {
    spdlog::info("refitd {}: mapped {} destination ranks of daemons on this host in {:.3f} s",
                 node_, peer_destinations_.mappings() - mapped_before,
                 absl::ToDoubleSeconds(absl::Now() - start));
  }
}

std::vector<v1::RankRegistration> EpochExecutor::RegistrationsOf(v1::Role role) const {
  std::vector<v1::RankRegistration> of_role = registry_->Registrations();
  of_role.erase(std::remove_if(of_role.begin(), of_role.end(),
                               [role](const v1::RankRegistration& r) { return r.role() != role; }),
                of_role.end());
  return of_role;
}

void EpochExecutor::RecordStats(const std::string& epoch_id, const v1::PlanSlice& slice,
                                const transport::ExecutionStats& stats) {
  if (stats.relay_buffers_left > 0) {
    spdlog::error("refitd {}: epoch {} left {} relay buffers allocated", node_, epoch_id,
                  stats.relay_buffers_left);
  }
  if (metrics_ == nullptr) return;
  metrics_->AddBytes(stats.bytes_by_route);
  metrics_->RelayBufferPeak(stats.relay_buffer_peak_bytes);
  for (const v1::DaemonPeer& peer : slice.daemons()) {
    auto sent = stats.bytes_sent_to.find(peer.index());
    auto received = stats.bytes_received_from.find(peer.index());
    metrics_->PeerBytes(peer.node(), sent == stats.bytes_sent_to.end() ? 0 : sent->second,
                        received == stats.bytes_received_from.end() ? 0 : received->second);
  }
}

}  // namespace refit::daemon

#include "transport/plan_executor.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "transport/gpu/device_copy.h"
#include "transport/gpu/device_memory.h"
#include "transport/posted_operations.h"
#include "transport/straight_write_stops.h"

namespace refit::transport {
namespace {

// What a message carries: a chunk of a batch's stream (its bytes, or a shared-memory notice
// of them), one transfer of an ordered plan, the receipt of a chunk handed over through
// shared memory, or the bytes a same-host peer wrote straight into this daemon's
// destination ranks in a batch (sent once they are all written; index
// kStoppedWritingIndex: its word that it stopped writing there in this epoch).
enum class MessageKind : uint64_t { kChunk = 0, kOrdered = 1, kReceipt = 2, kWritten = 3 };

// epoch (16 bits) | kind (2) | index (26) | sender daemon (20). The index is the
// transfer's ordinal in ordered plans, else (batch << kChunkBits) | chunk. Batches run one
// after another, so indexes that wrap never meet in flight.
uint64_t MessageTag(uint32_t epoch, MessageKind kind, int64_t index, int32_t sender) {
  return (uint64_t{epoch & 0xffffu} << 48) | (static_cast<uint64_t>(kind) << 46) |
         ((static_cast<uint64_t>(index) & ((uint64_t{1} << 26) - 1)) << 20) |
         (static_cast<uint64_t>(sender) & 0xfffffu);
}

// A batch's kWritten words have chunk part 0: chunk part 1 is free for the stop word.
constexpr int64_t kStoppedWritingIndex = 1;

Dims OffsetOf(const v1::Transfer& t) { return Dims(t.offset().begin(), t.offset().end()); }
Dims ExtentOf(const v1::Transfer& t) { return Dims(t.extent().begin(), t.extent().end()); }

int64_t Volume(const Dims& extent) {
  int64_t v = 1;
  for (int64_t e : extent) v *= e;
  return v;
}

// `copied` with the transfer it belongs to named (a copy that faulted says which tensor and
// ranks were being moved).
absl::Status InTransfer(absl::Status copied, const v1::Transfer& t) {
  if (copied.ok()) return copied;
  return absl::Status(
      copied.code(), absl::StrCat("moving \"", t.tensor(), "\" from rank ", t.src().rank(),
                                  " to destination rank ", t.dst().rank(), ": ", copied.message()));
}

}  // namespace

UcxEndpoint* PlanExecutor::PeerOf(int32_t daemon) const {
  return daemon >= 0 && daemon < static_cast<int32_t>(peers_.size()) ? peers_[daemon] : nullptr;
}

absl::StatusOr<ConstStridedRef> PlanExecutor::LocateSource(const v1::Endpoint& endpoint,
                                                           const v1::Transfer& t,
                                                           RunMemory* run_memory) const {
  if (IsViewEndpoint(endpoint)) {
    return std::as_const(buffers_).Locate(EndpointRole(endpoint.kind()), endpoint.rank(),
                                          endpoint.view(), t.tensor(), OffsetOf(t), ExtentOf(t));
  }
  absl::StatusOr<StridedRef> memory = LocateRunMemory(endpoint, t, run_memory);
  if (!memory.ok()) return memory.status();
  return ConstStridedRef(*memory);
}

absl::StatusOr<StridedRef> PlanExecutor::LocateDestination(const v1::Endpoint& endpoint,
                                                           const v1::Transfer& t,
                                                           RunMemory* run_memory) {
  if (endpoint.kind() == v1::ENDPOINT_SOURCE_VIEW) {
    return absl::InvalidArgumentError(
        absl::StrCat("a transfer of \"", t.tensor(), "\" would write into ",
                     RankName(v1::ROLE_SOURCE, endpoint.rank()), "'s view ", endpoint.view(),
                     ": source views are only read"));
  }
  if (endpoint.kind() == v1::ENDPOINT_DESTINATION_VIEW) {
    if (peer_destinations_ != nullptr) {  // a peer's rank, written straight (WrittenStraight)
      absl::StatusOr<int32_t> daemon = placement_.DaemonOf(v1::ROLE_DESTINATION, endpoint.rank());
      if (daemon.ok() && *daemon != self_) {
        return peer_destinations_->LocateForWrite(v1::ROLE_DESTINATION, endpoint.rank(),
                                                  endpoint.view(), t.tensor(), OffsetOf(t),
                                                  ExtentOf(t));
      }
    }
    return buffers_.LocateForWrite(v1::ROLE_DESTINATION, endpoint.rank(), endpoint.view(),
                                   t.tensor(), OffsetOf(t), ExtentOf(t));
  }
  return LocateRunMemory(endpoint, t, run_memory);
}

absl::StatusOr<StridedRef> PlanExecutor::LocateRunMemory(const v1::Endpoint& endpoint,
                                                         const v1::Transfer& t,
                                                         RunMemory* run_memory) const {
  const v1::Role role = EndpointRole(endpoint.kind());
  if (endpoint.kind() == v1::ENDPOINT_RELAY_BUFFER) {
    return run_memory->relays.Locate(endpoint, t.tensor(), OffsetOf(t), ExtentOf(t),
                                     placement_.DeviceOf(role, endpoint.rank()));
  }
  if (endpoint.kind() == v1::ENDPOINT_UNSPECIFIED) {
    return absl::InvalidArgumentError("endpoint without a kind");
  }
  return run_memory->scratch.Locate(role, endpoint.rank(), t.tensor(), OffsetOf(t), ExtentOf(t));
}

absl::Status PlanExecutor::CopyLocal(const v1::Transfer& t, RunMemory* run_memory,
                                     ExecutionStats* stats, gpu::DeviceCopyChain* copies) {
  absl::StatusOr<ConstStridedRef> from = LocateSource(t.src(), t, run_memory);
  if (!from.ok()) return from.status();
  return WriteDestination(t, *from, /*from_source_end=*/IsViewEndpoint(t.src()), run_memory, stats,
                          copies);
}

absl::Status PlanExecutor::WriteDestination(const v1::Transfer& t, const ConstStridedRef& from,
                                            bool from_source_end, RunMemory* run_memory,
                                            ExecutionStats* stats, gpu::DeviceCopyChain* copies) {
  const Dims extent = ExtentOf(t);
  const int element_bytes = buffers_.tensors().at(t.tensor()).element_bytes;
  PieceHashes& hashes = stats->piece_hashes;
  if (sink_ != nullptr && t.dst().kind() == v1::ENDPOINT_DESTINATION_VIEW &&
      sink_->Takes(t.dst().rank())) {
    const Dims offset = OffsetOf(t);
    absl::Status inside =
        buffers_.CheckBucketedBox(t.dst().rank(), t.dst().view(), t.tensor(), offset, extent);
    if (!inside.ok()) return InTransfer(inside, t);
    // The sink reads `from` now, which a pending copy may still be writing.
    if (absl::Status waited = copies->Wait(); !waited.ok()) return InTransfer(waited, t);
    if (hash_pieces_ && from.device < 0) {
      const uint64_t handed = HashBox(extent, element_bytes, from);
      hashes.at_destination[t.sequence()] = handed;
      if (from_source_end) hashes.at_source[t.sequence()] = handed;
    }
    return InTransfer(sink_->Write(t.dst().rank(), t.tensor(), offset, extent, element_bytes, from),
                      t);
  }
  absl::StatusOr<StridedRef> to = LocateDestination(t.dst(), t, run_memory);
  if (!to.ok()) return to.status();
  const bool in_host_memory = hash_pieces_ && from.device < 0 && to->device < 0;
  const bool hash_source = in_host_memory && from_source_end;
  const bool hash_destination = in_host_memory && t.dst().kind() == v1::ENDPOINT_DESTINATION_VIEW;
  uint64_t source_hash = 0, destination_hash = 0;
  absl::Status copied = InTransfer(
      copies->Copy(extent, element_bytes, from, *to, hash_source ? &source_hash : nullptr,
                   hash_destination ? &destination_hash : nullptr),
      t);
  if (!copied.ok()) return copied;
  if (hash_source) hashes.at_source[t.sequence()] = source_hash;
  if (hash_destination) hashes.at_destination[t.sequence()] = destination_hash;
  stats->runs += CountRuns(extent, from.strides, to->strides);
  return absl::OkStatus();
}

absl::StatusOr<std::optional<HostCopy>> PlanExecutor::HostCopyOf(
    const v1::Transfer& t, const std::optional<ConstStridedRef>& staged_from,
    const std::optional<StridedRef>& staged_to, RunMemory* run_memory) {
  if (!staged_to.has_value() && sink_ != nullptr &&
      t.dst().kind() == v1::ENDPOINT_DESTINATION_VIEW && sink_->Takes(t.dst().rank())) {
    return std::nullopt;
  }
  absl::StatusOr<ConstStridedRef> from =
      staged_from.has_value() ? *staged_from : LocateSource(t.src(), t, run_memory);
  if (!from.ok()) return from.status();
  absl::StatusOr<StridedRef> to =
      staged_to.has_value() ? *staged_to : LocateDestination(t.dst(), t, run_memory);
  if (!to.ok()) return to.status();
  if (from->device >= 0 || to->device >= 0) return std::nullopt;
  HostCopy copy;
  copy.extent = ExtentOf(t);
  copy.element_bytes = buffers_.tensors().at(t.tensor()).element_bytes;
  copy.from = *from;
  copy.to = *to;
  copy.hash_source = hash_pieces_ && !staged_from.has_value() && IsViewEndpoint(t.src());
  copy.hash_destination =
      hash_pieces_ && !staged_to.has_value() && t.dst().kind() == v1::ENDPOINT_DESTINATION_VIEW;
  return copy;
}

absl::Status PlanExecutor::RunHostCopiesOf(std::vector<HostCopy>* copies,
                                           const std::vector<const v1::Transfer*>& transfers,
                                           ExecutionStats* stats) {
  RunHostCopies(copies, copy_threads_);
  for (size_t i = 0; i < copies->size(); ++i) {
    const HostCopy& copy = (*copies)[i];
    const v1::Transfer& t = *transfers[i];
    if (!copy.status.ok()) return InTransfer(copy.status, t);
    if (copy.hash_source) stats->piece_hashes.at_source[t.sequence()] = copy.source_hash;
    if (copy.hash_destination) {
      stats->piece_hashes.at_destination[t.sequence()] = copy.destination_hash;
    }
    stats->runs += CountRuns(copy.extent, copy.from.strides, copy.to.strides);
  }
  return absl::OkStatus();
}

std::vector<PlanExecutor::Chunk> PlanExecutor::CutIntoChunks(
    const std::vector<const v1::Transfer*>& list) const {
  // Whole pieces close a chunk early, so a limit of total / kMaxChunks can still give up to
  // twice as many chunks: the limit doubles until they fit in the tag's chunk bits.
  for (int64_t limit = message_chunk_bytes_;; limit *= 2) {
    std::vector<Chunk> chunks;
    for (const v1::Transfer* t : list) {
      const int64_t bytes = PackedBytes({t});
      if (chunks.empty() || (chunks.back().bytes > 0 && chunks.back().bytes + bytes > limit)) {
        chunks.emplace_back();
      }
      chunks.back().pieces.push_back(t);
      chunks.back().bytes += bytes;
    }
    if (static_cast<int64_t>(chunks.size()) <= kMaxChunks) return chunks;
  }
}

PlanExecutor::BatchRoutes PlanExecutor::RouteBatch(const std::vector<Resolved>& transfers) const {
  BatchRoutes routes;
  for (const Resolved& r : transfers) {
    if (WrittenStraight(r)) {
      if (r.src_daemon == self_) {
        routes.local.push_back(r.transfer);
        routes.straight_to[r.dst_daemon] += r.transfer->bytes();
      } else {  // the peer writes it
        routes.written_by_peers.push_back(r.transfer);
        routes.straight_from[r.src_daemon] += r.transfer->bytes();
      }
    } else if (r.src_daemon == self_ && r.dst_daemon == self_) {
      routes.local.push_back(r.transfer);
    } else if ((r.src_daemon == self_ || r.dst_daemon == self_) && ViaNccl(*r.transfer)) {
      routes.nccl.push_back(r.transfer);
    } else if (r.src_daemon == self_) {
      routes.outgoing[r.dst_daemon].push_back(r.transfer);
    } else if (r.dst_daemon == self_) {
      routes.incoming[r.src_daemon].push_back(r.transfer);
    }
  }
  return routes;
}

std::vector<PlanExecutor::Stream> PlanExecutor::StreamsOf(const BatchRoutes& routes) const {
  const bool shared_memory = outbox_ != nullptr && inboxes_ != nullptr;
  std::vector<Stream> streams;
  for (const auto& [peer, list] : routes.incoming) {
    streams.push_back({peer, false, CutIntoChunks(list), PeerOf(peer)});
  }
  for (const auto& [peer, list] : routes.outgoing) {
    streams.push_back({peer, true, CutIntoChunks(list), PeerOf(peer)});
  }
  for (Stream& stream : streams) {
    if (shared_memory && shared_memory_peers_.count(stream.peer)) {
      stream.mailbox = std::make_shared<Mailbox>();
    }
  }
  return streams;
}

PlanExecutor::SlotSizes PlanExecutor::SlotSizesOf(const std::vector<Stream>& streams) {
  SlotSizes slots;
  for (const Stream& stream : streams) {
    if (stream.mailbox != nullptr && !stream.outgoing) continue;  // reads the sender's outbox
    int64_t largest = 0;
    for (const Chunk& chunk : stream.chunks) largest = std::max(largest, chunk.bytes);
    std::vector<int64_t>& into = stream.mailbox != nullptr ? slots.outbox : slots.staging;
    into.push_back(largest);
    if (stream.chunks.size() > 1) into.push_back(largest);
  }
  return slots;
}

absl::Status PlanExecutor::Reserve(const v1::Plan& plan) {
  if (plan.ordered_batches()) return absl::OkStatus();  // staged piece by piece, not in slots
  ordered_run_ = false;
  absl::StatusOr<std::vector<std::vector<Resolved>>> batches = ResolveBatches(plan);
  if (!batches.ok()) return batches.status();
  int64_t staging = 0, outbox = 0;
  for (const std::vector<Resolved>& batch : *batches) {
    const SlotSizes slots = SlotSizesOf(StreamsOf(RouteBatch(batch)));
    staging = std::max(staging, StagingPool::CarvedBytes(slots.staging));
    outbox = std::max(outbox, StagingPool::CarvedBytes(slots.outbox));
  }
  if (staging > 0 && host_staging_ != nullptr) {
    if (absl::Status carved = host_staging_->Carve(-1, {staging}).status(); !carved.ok()) {
      return carved;
    }
  }
  if (outbox > 0 && outbox_ != nullptr) return outbox_->Carve({outbox}).status();
  return absl::OkStatus();
}

// What the stages of one batch share (RunBatch).
struct PlanExecutor::BatchRun {
  BatchRun(int32_t batch, uint32_t epoch, absl::Time deadline, RunMemory* run_memory,
           ExecutionStats* stats, BatchRoutes routes, UcxWorker* worker, StagingPool* host_staging,
           absl::Duration stall_limit)
      : batch(batch),
        epoch(epoch),
        deadline(deadline),
        run_memory(run_memory),
        stats(stats),
        routes(std::move(routes)),
        host_staging(host_staging),
        posted(worker, host_staging, batch, deadline, stall_limit) {}

  const int32_t batch;
  const uint32_t epoch;
  const absl::Time deadline;
  RunMemory* const run_memory;
  ExecutionStats* const stats;
  const BatchRoutes routes;
  StagingPool* const host_staging;
  // One stream of messages per peer and direction, and how many rounds the longest takes.
  std::vector<Stream> streams;
  size_t rounds = 0;
  // Per round parity, the stream of each operation in posted.rounds.
  std::vector<size_t> stream_of[2];
  // What same-host peers say they wrote straight into ranks here in this batch.
  std::shared_ptr<std::map<int32_t, int64_t>> written_counts =
      std::make_shared<std::map<int32_t, int64_t>>();
  // Every operation posted and not yet finished; declared last, so it is destroyed first
  // (cancelling what is left) while everything its operations touch is still here.
  PostedOperations posted;

  // The tag index of round `r`'s chunk, and of the batch's words of straight writes.
  int64_t ChunkIndex(size_t r) const {
    return (int64_t{batch} << kChunkBits) | static_cast<int64_t>(r);
  }
  int64_t WrittenIndex() const { return int64_t{batch} << kChunkBits; }
};

namespace {

// "the 4096 bytes to daemon 1 (part 2 of 3, through shared memory)".
template <typename Stream, typename Chunk>
std::string Describe(const Stream& stream, const Chunk& chunk, size_t r) {
  return absl::StrCat("the ", chunk.bytes, " bytes ", stream.outgoing ? "to" : "from", " daemon ",
                      stream.peer, " (part ", r + 1, " of ", stream.chunks.size(),
                      stream.mailbox != nullptr ? ", through shared memory)" : ")");
}

}  // namespace

absl::Status PlanExecutor::RunBatch(const std::vector<Resolved>& transfers, int32_t batch,
                                    uint32_t epoch, absl::Time deadline, RunMemory* run_memory,
                                    ExecutionStats* stats) {
  StagingPool* host_staging = host_staging_ != nullptr ? host_staging_ : &run_memory->host_staging;
  BatchRun run(batch, epoch, deadline, run_memory, stats, RouteBatch(transfers), worker_,
               host_staging, stall_limit_);
  CountStraightWrites(run);
  const BatchRoutes& routes = run.routes;
  if ((!routes.incoming.empty() || !routes.outgoing.empty() || !routes.straight_to.empty() ||
       !routes.straight_from.empty()) &&
      worker_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("batch ", batch, " crosses daemons but this one has no UCX worker"));
  }
  // The stages, in order. Messages go in rounds: round r + 1 is packed and posted while
  // round r is on the wire, then round r is unpacked. On any error the batch returns, and
  // `run.posted` cancels what is still posted.
  if (absl::Status carved = CarveStreams(run); !carved.ok()) return carved;
  if (absl::Status posted = PostWordsOfPeers(run); !posted.ok()) return posted;
  if (run.rounds > 0) {
    if (absl::Status posted = PostRound(run, 0); !posted.ok()) return posted;
  }
  if (absl::Status copied = CopyLocally(run); !copied.ok()) return copied;
  if (absl::Status said = SayWrittenStraight(run); !said.ok()) return said;
  if (!routes.nccl.empty()) {
    absl::Status sent =
        RunNcclStep(routes.nccl, absl::StrCat("batch ", batch), deadline, run_memory, stats);
    if (!sent.ok()) return sent;
  }
  for (size_t r = 0; r < run.rounds; ++r) {
    if (absl::Status finished = FinishRound(run, r); !finished.ok()) return finished;
  }
  return Drain(run);
}

void PlanExecutor::CountStraightWrites(BatchRun& run) const {
  for (const auto& [peer, bytes] : run.routes.straight_to) {
    run.stats->bytes_via_shared_memory += bytes;
    run.stats->bytes_sent_to[peer] += bytes;
  }
  for (const auto& [peer, bytes] : run.routes.straight_from) {
    run.stats->bytes_via_shared_memory += bytes;
    run.stats->bytes_received_from[peer] += bytes;
  }
  for (const v1::Transfer* t : run.routes.written_by_peers) {
    run.stats->piece_hashes.written_by_peers.insert(t->sequence());
  }
}

absl::Status PlanExecutor::CarveStreams(BatchRun& run) {
  // One stream of messages per peer and direction (receives first), each cut into chunks
  // of whole pieces. Each stream has two staging slots of its largest chunk, carved from
  // the pool that outlives the batch (and, given one, the epoch), so staging stays small
  // whatever the batch's size. With a peer on this host (UseSharedMemory) the slots of an
  // outgoing stream are in the shared-memory outbox and the messages are notices; an
  // incoming stream needs no slots (it unpacks from the sender's outbox) and answers each
  // chunk with a receipt, which the sender awaits before it packs into that slot again.
  run.streams = StreamsOf(run.routes);
  for (const Stream& stream : run.streams) {
    run.rounds = std::max(run.rounds, stream.chunks.size());
    // A receipt goes back on the endpoint to the sender (held to every peer received from).
    if (stream.endpoint == nullptr && (stream.outgoing || stream.mailbox != nullptr)) {
      return absl::FailedPreconditionError(
          absl::StrCat("batch ", run.batch, ": no connection to daemon ", stream.peer));
    }
  }
  const SlotSizes slot_sizes = SlotSizesOf(run.streams);
  std::vector<uint8_t*> carved, outbox_carved;
  if (!slot_sizes.staging.empty()) {
    absl::StatusOr<std::vector<uint8_t*>> staging = run.host_staging->Carve(-1, slot_sizes.staging);
    if (!staging.ok()) {
      return absl::Status(staging.status().code(),
                          absl::StrCat("batch ", run.batch, ": ", staging.status().message()));
    }
    carved = *std::move(staging);
  }
  if (!slot_sizes.outbox.empty()) {
    absl::StatusOr<std::vector<uint8_t*>> outbox = outbox_->Carve(slot_sizes.outbox);
    if (!outbox.ok()) {
      return absl::Status(outbox.status().code(),
                          absl::StrCat("batch ", run.batch, ": ", outbox.status().message()));
    }
    outbox_carved = *std::move(outbox);
  }
  size_t next = 0, next_in_outbox = 0;
  for (Stream& stream : run.streams) {
    if (stream.mailbox != nullptr && !stream.outgoing) continue;
    std::vector<uint8_t*>& from = stream.mailbox != nullptr ? outbox_carved : carved;
    size_t& at = stream.mailbox != nullptr ? next_in_outbox : next;
    stream.slots[0] = stream.slots[1] = from[at++];
    if (stream.chunks.size() > 1) stream.slots[1] = from[at++];
  }
  return absl::OkStatus();
}

absl::Status PlanExecutor::PostWordsOfPeers(BatchRun& run) {
  // A peer that writes straight into ranks here says when it is done with this batch (the
  // next batch may read what it wrote): its message says how many bytes it wrote.
  for (const auto& [peer, bytes] : run.routes.straight_from) {
    absl::StatusOr<PendingOperation> posted =
        worker_->PostReceive(MessageTag(run.epoch, MessageKind::kWritten, run.WrittenIndex(), peer),
                             &(*run.written_counts)[peer], sizeof(int64_t));
    if (!posted.ok()) return posted.status();
    posted->what = absl::StrCat("daemon ", peer, "'s word that it wrote its ", bytes,
                                " bytes straight into ranks here");
    posted->memory_owner = run.written_counts;
    run.posted.words_received.push_back(*std::move(posted));
  }
  return absl::OkStatus();
}

absl::Status PlanExecutor::PostRound(BatchRun& run, size_t r) {
  // A receive per incoming stream, a packed send per outgoing one (and, through shared
  // memory, the receive of its receipt).
  for (size_t s = 0; s < run.streams.size(); ++s) {
    Stream& stream = run.streams[s];
    if (r >= stream.chunks.size()) continue;
    const Chunk& chunk = stream.chunks[r];
    uint8_t* slot = stream.slots[r % 2];
    const int64_t index = run.ChunkIndex(r);
    absl::StatusOr<PendingOperation> posted;
    if (!stream.outgoing && stream.mailbox != nullptr) {
      posted = worker_->PostReceive(MessageTag(run.epoch, MessageKind::kChunk, index, stream.peer),
                                    stream.mailbox->notices[r % 2].data(), kHandoffNoticeBytes);
    } else if (!stream.outgoing) {
      posted = worker_->PostReceive(MessageTag(run.epoch, MessageKind::kChunk, index, stream.peer),
                                    slot, chunk.bytes);
    } else {
      absl::Status packed = CopyPieces(chunk.pieces, slot, /*staging_device=*/-1,
                                       /*pack=*/true, run.run_memory, run.stats);
      if (!packed.ok()) return packed;
      const void* message = slot;
      int64_t message_bytes = chunk.bytes;
      if (stream.mailbox != nullptr) {
        stream.mailbox->notices[r % 2] = EncodeNotice(outbox_->NoticeFor(slot, chunk.bytes));
        message = stream.mailbox->notices[r % 2].data();
        message_bytes = kHandoffNoticeBytes;
        absl::StatusOr<PendingOperation> receipt =
            worker_->PostReceive(MessageTag(run.epoch, MessageKind::kReceipt, index, stream.peer),
                                 &stream.mailbox->receipts[r % 2], sizeof(int64_t));
        if (!receipt.ok()) return receipt.status();
        receipt->what = absl::StrCat("the receipt of ", Describe(stream, chunk, r));
        receipt->memory_owner = stream.mailbox;
        run.posted.receipts_awaited[r % 2].push_back(*std::move(receipt));
        run.stats->bytes_via_shared_memory += chunk.bytes;
      }
      posted = stream.endpoint->PostSend(MessageTag(run.epoch, MessageKind::kChunk, index, self_),
                                         message, message_bytes);
      if (posted.ok()) run.stats->bytes_sent_to[stream.peer] += chunk.bytes;
    }
    if (!posted.ok()) return posted.status();
    posted->what = Describe(stream, chunk, r);
    posted->memory_owner = stream.mailbox != nullptr ? std::shared_ptr<void>(stream.mailbox)
                                                     : run.host_staging->BlockOf(-1);
    run.posted.rounds[r % 2].push_back(*std::move(posted));
    run.stream_of[r % 2].push_back(s);
  }
  return absl::OkStatus();
}

absl::Status PlanExecutor::CopyLocally(BatchRun& run) {
  // Copies between host memory run on the copy threads; the others (GPU memory, the sink)
  // are issued back to back and waited for once (the NCCL step may read what they wrote).
  // A batch's copies write disjoint bytes.
  std::vector<HostCopy> host;
  std::vector<const v1::Transfer*> host_transfers, others;
  for (const v1::Transfer* t : run.routes.local) {
    absl::StatusOr<std::optional<HostCopy>> job =
        HostCopyOf(*t, std::nullopt, std::nullopt, run.run_memory);
    if (!job.ok()) return job.status();
    if (!job->has_value()) {
      others.push_back(t);
      continue;
    }
    host.push_back(**std::move(job));
    host_transfers.push_back(t);
  }
  if (absl::Status copied = RunHostCopiesOf(&host, host_transfers, run.stats); !copied.ok()) {
    return copied;
  }
  gpu::DeviceCopyChain copies;
  for (const v1::Transfer* t : others) {
    absl::Status copied = CopyLocal(*t, run.run_memory, run.stats, &copies);
    if (!copied.ok()) return copied;
  }
  if (absl::Status waited = copies.Wait(); !waited.ok()) {
    return absl::Status(waited.code(),
                        absl::StrCat("batch ", run.batch, "'s local copies: ", waited.message()));
  }
  return absl::OkStatus();
}

absl::Status PlanExecutor::SayWrittenStraight(BatchRun& run) {
  // The local copies wrote straight into same-host peers' ranks: each peer hears how many
  // bytes, and reads them once its word arrives.
  for (const auto& [peer, bytes] : run.routes.straight_to) {
    UcxEndpoint* endpoint = PeerOf(peer);
    if (endpoint == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("batch ", run.batch, ": no connection to daemon ", peer));
    }
    auto count = std::make_shared<int64_t>(bytes);
    absl::StatusOr<PendingOperation> sent =
        endpoint->PostSend(MessageTag(run.epoch, MessageKind::kWritten, run.WrittenIndex(), self_),
                           count.get(), sizeof(*count));
    if (!sent.ok()) return sent.status();
    sent->what = absl::StrCat("the word to daemon ", peer, " that ", bytes,
                              " bytes were written straight into its ranks");
    sent->memory_owner = count;
    run.posted.words_sent.push_back(*std::move(sent));
  }
  return absl::OkStatus();
}

absl::Status PlanExecutor::FinishRound(BatchRun& run, size_t r) {
  // The other slots held round r - 1, which is done (and, through shared memory, its
  // receipts are in): round r + 1 goes there.
  if (r + 1 < run.rounds) {
    if (absl::Status received = run.posted.Wait(&run.posted.receipts_awaited[(r + 1) % 2]);
        !received.ok()) {
      return received;
    }
    if (absl::Status posted = PostRound(run, r + 1); !posted.ok()) return posted;
  }
  std::vector<PendingOperation>& round = run.posted.rounds[r % 2];
  if (absl::Status done = run.posted.Wait(&round); !done.ok()) return done;
  for (size_t i = 0; i < round.size(); ++i) {
    const Stream& stream = run.streams[run.stream_of[r % 2][i]];
    if (stream.outgoing) continue;
    if (absl::Status unpacked = Unpack(run, stream, r, static_cast<int64_t>(round[i].length));
        !unpacked.ok()) {
      return unpacked;
    }
  }
  round.clear();
  run.stream_of[r % 2].clear();
  return absl::OkStatus();
}

absl::Status PlanExecutor::Unpack(BatchRun& run, const Stream& stream, size_t r,
                                  int64_t received_bytes) {
  const Chunk& chunk = stream.chunks[r];
  uint8_t* message = stream.slots[r % 2];
  int64_t message_bytes = received_bytes;
  if (stream.mailbox != nullptr) {
    absl::StatusOr<HandoffNotice> notice =
        DecodeNotice(stream.mailbox->notices[r % 2].data(), message_bytes);
    absl::StatusOr<const uint8_t*> located =
        notice.ok() ? inboxes_->Locate(stream.peer, *notice) : notice.status();
    if (!located.ok()) {
      return absl::DataLossError(absl::StrCat("batch ", run.batch, ": from daemon ", stream.peer,
                                              ": ", located.status().message()));
    }
    // The sender's outbox, mapped writable (the receipt says when it may reuse it).
    message = const_cast<uint8_t*>(*located);
    message_bytes = notice->bytes;
    run.stats->bytes_via_shared_memory += chunk.bytes;
  }
  if (message_bytes != chunk.bytes) {
    return absl::DataLossError(absl::StrCat("batch ", run.batch, ": daemon ", stream.peer, " sent ",
                                            message_bytes, " bytes, expected ", chunk.bytes));
  }
  run.stats->bytes_received_from[stream.peer] += chunk.bytes;
  if (on_message_received_) on_message_received_(message, chunk.bytes);
  absl::Status unpacked = CopyPieces(chunk.pieces, message, /*staging_device=*/-1,
                                     /*pack=*/false, run.run_memory, run.stats);
  if (!unpacked.ok()) return unpacked;
  if (stream.mailbox != nullptr) {
    const int64_t index = run.ChunkIndex(r);
    stream.mailbox->receipts[r % 2] = index;
    absl::StatusOr<PendingOperation> receipt =
        stream.endpoint->PostSend(MessageTag(run.epoch, MessageKind::kReceipt, index, self_),
                                  &stream.mailbox->receipts[r % 2], sizeof(int64_t));
    if (!receipt.ok()) return receipt.status();
    receipt->what = absl::StrCat("the receipt of ", Describe(stream, chunk, r));
    receipt->memory_owner = stream.mailbox;
    run.posted.receipts_sent.push_back(*std::move(receipt));
  }
  return absl::OkStatus();
}

absl::Status PlanExecutor::Drain(BatchRun& run) {
  if (absl::Status done = run.posted.WaitForAll(); !done.ok()) return done;
  for (const auto& [peer, bytes] : run.routes.straight_from) {
    if ((*run.written_counts)[peer] != bytes) {
      return absl::DataLossError(absl::StrCat("batch ", run.batch, ": daemon ", peer, " wrote ",
                                              (*run.written_counts)[peer],
                                              " bytes straight into ranks here, expected ", bytes));
    }
  }
  return absl::OkStatus();
}

bool PlanExecutor::WrittenStraight(const Resolved& r) const {
  const v1::Transfer& t = *r.transfer;
  if (ordered_run_ || peer_destinations_ == nullptr || r.src_daemon == r.dst_daemon) return false;
  const int32_t peer = r.src_daemon == self_ ? r.dst_daemon : r.src_daemon;
  // From a view (a source's, or a destination's the writer holds, forwarded to a replica
  // in a later batch than the one that wrote it) into a listed destination rank.
  return (r.src_daemon == self_ || r.dst_daemon == self_) && shared_memory_peers_.count(peer) &&
         IsViewEndpoint(t.src()) && t.dst().kind() == v1::ENDPOINT_DESTINATION_VIEW &&
         placement_.DeviceOf(EndpointRole(t.src().kind()), t.src().rank()) < 0 &&
         placement_.DeviceOf(v1::ROLE_DESTINATION, t.dst().rank()) < 0 &&
         straight_ranks_.count(t.dst().rank());
}

bool PlanExecutor::DeliveredHere(const Resolved& r) const {
  if (r.transfer->dst().kind() != v1::ENDPOINT_DESTINATION_VIEW) return false;
  return WrittenStraight(r) ? r.src_daemon == self_ : r.dst_daemon == self_;
}

int64_t PlanExecutor::PackedBytes(const std::vector<const v1::Transfer*>& list) const {
  int64_t bytes = 0;
  for (const v1::Transfer* t : list) {
    bytes += Volume(ExtentOf(*t)) * buffers_.tensors().at(t->tensor()).element_bytes;
  }
  return bytes;
}

absl::Status PlanExecutor::CopyPieces(const std::vector<const v1::Transfer*>& list,
                                      uint8_t* staging, int32_t staging_device, bool pack,
                                      RunMemory* run_memory, ExecutionStats* stats) {
  // Pieces between host memory and host staging run on the copy threads first; the
  // others are issued back to back and waited for once, at the end: the staging is sent,
  // or reused, only after.
  std::vector<HostCopy> host;
  std::vector<const v1::Transfer*> host_transfers;
  std::vector<std::pair<const v1::Transfer*, uint8_t*>> others;  // and where in the staging
  uint8_t* at = staging;
  for (const v1::Transfer* t : list) {
    uint8_t* piece = at;
    at += PackedBytes({t});
    if (staging_device >= 0) {
      others.emplace_back(t, piece);
      continue;
    }
    const StridedRef dense{piece, RowMajorStrides(ExtentOf(*t)), -1};
    absl::StatusOr<std::optional<HostCopy>> job =
        pack ? HostCopyOf(*t, std::nullopt, dense, run_memory)
             : HostCopyOf(*t, ConstStridedRef(dense), std::nullopt, run_memory);
    if (!job.ok()) return job.status();
    if (!job->has_value()) {
      others.emplace_back(t, piece);
      continue;
    }
    host.push_back(**std::move(job));
    host_transfers.push_back(t);
  }
  if (absl::Status copied = RunHostCopiesOf(&host, host_transfers, stats); !copied.ok()) {
    return copied;
  }
  gpu::DeviceCopyChain copies;
  for (const auto& [t, cursor] : others) {
    const Dims extent = ExtentOf(*t);
    const int element_bytes = buffers_.tensors().at(t->tensor()).element_bytes;
    const StridedRef dense{cursor, RowMajorStrides(extent), staging_device};
    if (!pack) {
      absl::Status unpacked =
          WriteDestination(*t, dense, /*from_source_end=*/false, run_memory, stats, &copies);
      if (!unpacked.ok()) return unpacked;
      continue;
    }
    absl::StatusOr<ConstStridedRef> side = LocateSource(t->src(), *t, run_memory);
    if (!side.ok()) return side.status();
    const bool hash_source =
        hash_pieces_ && IsViewEndpoint(t->src()) && side->device < 0 && staging_device < 0;
    uint64_t source_hash = 0;
    absl::Status copied = InTransfer(
        copies.Copy(extent, element_bytes, *side, dense, hash_source ? &source_hash : nullptr), *t);
    if (!copied.ok()) return copied;
    if (hash_source) stats->piece_hashes.at_source[t->sequence()] = source_hash;
    stats->runs += CountRuns(extent, side->strides, dense.strides);
  }
  return copies.Wait();
}

bool PlanExecutor::ViaNccl(const v1::Transfer& t) const {
  return nccl_ != nullptr && nccl_->group != nullptr && nccl_->ranks.PairOf(t).has_value();
}

absl::Status PlanExecutor::RunNcclStep(const std::vector<const v1::Transfer*>& transfers,
                                       const std::string& step_name, absl::Time deadline,
                                       RunMemory* run_memory, ExecutionStats* stats) {
  const gpu::CommunicatorRanks& ranks = nccl_->ranks;
  const std::vector<gpu::NcclMessage> messages = gpu::ScheduleStep(transfers, ranks, nccl_->gpus);
  // Each message's staging lives on its own GPU.
  std::map<int32_t, std::vector<int64_t>> sizes_by_device;
  for (const gpu::NcclMessage& message : messages) {
    if (!nccl_->member_of.count(message.gpu)) {
      return absl::FailedPreconditionError(
          absl::StrCat(step_name, ": NCCL rank ", message.gpu, " is not a GPU of this daemon"));
    }
    // The call's size is the plan's; the staging is packed with what the tensors hold.
    if (const int64_t packed = PackedBytes(message.pieces); packed != message.call.bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          step_name, ": the plan's pieces between NCCL ranks ", message.gpu, " and ",
          message.call.peer, " say ", message.call.bytes, " bytes, their boxes hold ", packed));
    }
    sizes_by_device[ranks.DeviceOf(message.gpu)].push_back(message.call.bytes);
  }
  StagingPool* pool = device_staging_ != nullptr ? device_staging_ : &run_memory->device_staging;
  std::vector<uint8_t*> staging(messages.size(), nullptr);
  for (const auto& [device, sizes] : sizes_by_device) {
    absl::StatusOr<std::vector<uint8_t*>> carved = pool->Carve(device, sizes);
    if (!carved.ok()) {
      return absl::Status(carved.status().code(),
                          absl::StrCat(step_name, ": ", carved.status().message()));
    }
    size_t next = 0;
    for (size_t i = 0; i < messages.size(); ++i) {
      if (ranks.DeviceOf(messages[i].gpu) == device) staging[i] = (*carved)[next++];
    }
  }
  std::vector<gpu::NcclGroup::Message> issued;
  for (size_t i = 0; i < messages.size(); ++i) {
    const gpu::NcclMessage& message = messages[i];
    const int32_t peer_daemon = ranks.DaemonOf(message.call.peer);
    if (message.call.send) {
      absl::Status packed = CopyPieces(message.pieces, staging[i], ranks.DeviceOf(message.gpu),
                                       /*pack=*/true, run_memory, stats);
      if (!packed.ok()) return packed;
      stats->bytes_sent_to[peer_daemon] += message.call.bytes;
    } else {
      stats->bytes_received_from[peer_daemon] += message.call.bytes;
    }
    issued.push_back({nccl_->member_of.at(message.gpu), message.call.send, message.call.peer,
                      staging[i], message.call.bytes});
  }
  absl::Status done = nccl_->group->RunStep(issued, deadline);
  if (!done.ok()) {
    return absl::Status(done.code(), absl::StrCat(step_name, ": ", done.message()));
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    if (messages[i].call.send) continue;
    absl::Status unpacked =
        CopyPieces(messages[i].pieces, staging[i], ranks.DeviceOf(messages[i].gpu),
                   /*pack=*/false, run_memory, stats);
    if (!unpacked.ok()) return unpacked;
  }
  return absl::OkStatus();
}

absl::Status PlanExecutor::RunOrdered(const std::vector<Resolved>& transfers, uint32_t epoch,
                                      absl::Time deadline, RunMemory* run_memory,
                                      ExecutionStats* stats) {
  std::vector<uint8_t> staging;
  for (size_t i = 0; i < transfers.size(); ++i) {
    const Resolved& r = transfers[i];
    const v1::Transfer& t = *r.transfer;
    const int64_t ordinal = t.sequence();
    if (r.src_daemon == self_ && r.dst_daemon == self_) {
      gpu::DeviceCopyChain copies;  // in plan order: waited for before the next transfer
      absl::Status copied = CopyLocal(t, run_memory, stats, &copies);
      if (copied.ok()) copied = copies.Wait();
      if (!copied.ok()) return copied;
      continue;
    }
    if (r.src_daemon != self_ && r.dst_daemon != self_) continue;
    if (interrupt_ != nullptr && interrupt_->raised()) {
      return absl::CancelledError(
          absl::StrCat("interrupted (", interrupt_->reason(), ") before transfer ", ordinal));
    }
    if (ViaNccl(t)) {  // a step of its own
      absl::Status sent =
          RunNcclStep({&t}, absl::StrCat("transfer ", ordinal), deadline, run_memory, stats);
      if (!sent.ok()) return sent;
      continue;
    }
    if (worker_ == nullptr) {
      return absl::FailedPreconditionError(
          "the plan crosses daemons but this one has no UCX worker");
    }
    const Dims extent = ExtentOf(t);
    const int element_bytes = buffers_.tensors().at(t.tensor()).element_bytes;
    staging.resize(Volume(extent) * element_bytes);
    const StridedRef dense{staging.data(), RowMajorStrides(extent)};
    if (r.src_daemon == self_) {
      UcxEndpoint* endpoint = PeerOf(r.dst_daemon);
      if (endpoint == nullptr) {
        return absl::FailedPreconditionError(
            absl::StrCat("no connection to daemon ", r.dst_daemon));
      }
      absl::StatusOr<ConstStridedRef> from = LocateSource(t.src(), t, run_memory);
      if (!from.ok()) return from.status();
      absl::Status packed = InTransfer(gpu::CopyAnyBox(extent, element_bytes, *from, dense), t);
      if (!packed.ok()) return packed;
      absl::Status sent = endpoint->Send(MessageTag(epoch, MessageKind::kOrdered, ordinal, self_),
                                         staging.data(), staging.size(), deadline);
      if (!sent.ok()) return sent;
      stats->bytes_sent_to[r.dst_daemon] += staging.size();
    } else {
      absl::StatusOr<size_t> got = worker_->Receive(
          MessageTag(epoch, MessageKind::kOrdered, ordinal, r.src_daemon), &staging, deadline);
      if (!got.ok()) return got.status();
      stats->bytes_received_from[r.src_daemon] += *got;
      if (on_message_received_) on_message_received_(staging.data(), *got);
      gpu::DeviceCopyChain copies;  // the staging is reused for the next transfer
      absl::Status unpacked =
          WriteDestination(t, dense, /*from_source_end=*/false, run_memory, stats, &copies);
      if (unpacked.ok()) unpacked = copies.Wait();
      if (!unpacked.ok()) return unpacked;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::vector<PlanExecutor::Resolved>>> PlanExecutor::ResolveBatches(
    const v1::Plan& plan) const {
  std::vector<std::vector<Resolved>> batches(plan.batches_size());
  for (int b = 0; b < plan.batches_size(); ++b) {
    for (const v1::Transfer& t : plan.batches(b).transfers()) {
      if (!buffers_.tensors().contains(t.tensor())) {
        return absl::InvalidArgumentError(
            absl::StrCat("batch ", b, ": unknown tensor ", t.tensor()));
      }
      absl::StatusOr<int32_t> src =
          placement_.DaemonOf(EndpointRole(t.src().kind()), t.src().rank());
      absl::StatusOr<int32_t> dst =
          placement_.DaemonOf(EndpointRole(t.dst().kind()), t.dst().rank());
      if (!src.ok() || !dst.ok()) {
        return absl::Status(
            src.ok() ? dst.status().code() : src.status().code(),
            absl::StrCat("batch ", b, ", ", t.tensor(), ": ",
                         src.ok() ? dst.status().message() : src.status().message()));
      }
      if (!v1::Route_IsValid(t.route())) {  // it indexes bytes_by_route
        return absl::InvalidArgumentError(absl::StrCat("batch ", b, ", ", t.tensor(),
                                                       ": a transfer with unknown route ",
                                                       static_cast<int>(t.route())));
      }
      batches[b].push_back(Resolved{&t, *src, *dst});
    }
  }
  return batches;
}

PlanExecutor::StraightWriteParties PlanExecutor::PartiesOf(
    const std::vector<std::vector<Resolved>>& batches) const {
  StraightWriteParties parties;
  for (int b = 0; b < static_cast<int>(batches.size()); ++b) {
    for (const Resolved& r : batches[b]) {
      if (!WrittenStraight(r)) continue;
      if (r.src_daemon == self_) parties.last_batch_writing_to[r.dst_daemon] = b;
      if (r.dst_daemon == self_) parties.writers.insert(r.src_daemon);
    }
  }
  return parties;
}

absl::Duration PlanExecutor::StopLimit() const {
  return stall_limit_ == absl::InfiniteDuration() ? kDefaultStopLimit : stall_limit_;
}

uint64_t PlanExecutor::StoppedWritingTag(uint32_t epoch, int32_t writer) const {
  return MessageTag(epoch, MessageKind::kWritten, kStoppedWritingIndex, writer);
}

absl::Status PlanExecutor::SayNotWriting(const v1::Plan& plan, uint32_t epoch) {
  ordered_run_ = plan.ordered_batches();
  absl::StatusOr<std::vector<std::vector<Resolved>>> batches = ResolveBatches(plan);
  if (!batches.ok()) return batches.status();
  const StraightWriteParties parties = PartiesOf(*batches);
  if (parties.last_batch_writing_to.empty()) return absl::OkStatus();
  if (worker_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "epoch ", epoch, ": this daemon writes straight into peers but has no UCX worker"));
  }
  StraightWriteStops stops(worker_);
  absl::Status told;
  for (const auto& [peer, last] : parties.last_batch_writing_to) {
    absl::Status one = stops.Tell(peer, PeerOf(peer), StoppedWritingTag(epoch, self_));
    if (told.ok()) told = one;
  }
  absl::Status settled = stops.Settle(StopLimit());
  return told.ok() ? settled : told;
}

absl::StatusOr<ExecutionStats> PlanExecutor::Run(const v1::Plan& plan, uint32_t epoch,
                                                 absl::Time deadline) {
  ordered_run_ = plan.ordered_batches();
  absl::StatusOr<std::vector<std::vector<Resolved>>> batches = ResolveBatches(plan);
  if (!batches.ok()) {
    return absl::Status(batches.status().code(),
                        absl::StrCat("epoch ", epoch, ": ", batches.status().message()));
  }
  // Each writer's word that it stopped writing straight into ranks here is awaited however
  // the run ends (transport/straight_write_stops.h).
  const StraightWriteParties parties = PartiesOf(*batches);
  if ((!parties.writers.empty() || !parties.last_batch_writing_to.empty()) && worker_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "epoch ", epoch,
        ": pieces are written straight between daemons but this one has no UCX worker"));
  }
  StraightWriteStops stops(worker_);
  auto stop_tag = [&](int32_t sender) { return StoppedWritingTag(epoch, sender); };
  absl::Status expected;
  for (int32_t writer : parties.writers) {
    if (expected.ok()) expected = stops.Expect(writer, stop_tag(writer));
  }
  absl::StatusOr<ExecutionStats> ran = absl::UnknownError("not run");
  if (!expected.ok()) {
    ran = absl::Status(expected.code(), absl::StrCat("epoch ", epoch, ": ", expected.message()));
  } else {
    ran = RunResolved(plan, *batches, epoch, deadline, [&](int batch) {
      absl::Status told;
      for (const auto& [peer, last] : parties.last_batch_writing_to) {
        if (last == batch && told.ok()) told = stops.Tell(peer, PeerOf(peer), stop_tag(self_));
      }
      return told;
    });
  }
  // A run that ended early has not told every peer yet.
  for (const auto& [peer, last] : parties.last_batch_writing_to) {
    stops.Tell(peer, PeerOf(peer), stop_tag(self_)).IgnoreError();  // a silent peer waits it out
  }
  absl::Status settled = stops.Settle(StopLimit());
  // After a run that succeeded every batch's word of what was written arrived, so the bytes
  // are all in: a stop word that went missing after them changes nothing here.
  if (settled.ok() || ran.ok()) return ran;
  return absl::Status(ran.status().code(),
                      absl::StrCat(ran.status().message(), "; ", settled.message()));
}

absl::StatusOr<ExecutionStats> PlanExecutor::RunResolved(
    const v1::Plan& plan, const std::vector<std::vector<Resolved>>& batches, uint32_t epoch,
    absl::Time deadline, const std::function<absl::Status(int batch)>& after_batch) {
  RunMemory run_memory{
      ScratchArena(buffers_.tensors()),
      RelayBuffers(buffers_.tensors(), RelayBufferAllocator(DeviceStagingAllocator())),
      StagingPool(HostStagingAllocator()), StagingPool(DeviceStagingAllocator())};
  // This daemon's relay buffers, laid out in one block per device before the run.
  absl::Status relays = run_memory.relays.Prepare(
      plan,
      [&](int64_t rank) {
        absl::StatusOr<int32_t> daemon = placement_.DaemonOf(v1::ROLE_SOURCE, rank);
        return daemon.ok() && *daemon == self_;
      },
      [&](int64_t rank) { return placement_.DeviceOf(v1::ROLE_SOURCE, rank); });
  if (!relays.ok()) {
    return absl::Status(relays.code(), absl::StrCat("epoch ", epoch, ": ", relays.message()));
  }
  if (peer_destinations_ != nullptr) {
    if (absl::Status backed = peer_destinations_->CheckBacked(); !backed.ok()) {
      return absl::Status(
          backed.code(), absl::StrCat("epoch ", epoch,
                                      ": a same-host peer's destination rank: ", backed.message()));
    }
  }
  ExecutionStats stats;
  stats.relay_buffer_block_bytes = run_memory.relays.block_bytes();
  const absl::Time start = absl::Now();
  std::set<int64_t> receivers;  // destination ranks this daemon wrote in this batch
  for (int b = 0; b < static_cast<int>(batches.size()); ++b) {
    const std::vector<Resolved>& resolved = batches[b];
    receivers.clear();
    int64_t batch_delivered = 0;
    for (const Resolved& r : resolved) {
      const v1::Transfer& t = *r.transfer;
      if (DeliveredHere(r)) {
        batch_delivered += t.bytes();
        receivers.insert(t.dst().rank());
      }
      if (r.src_daemon == self_ || r.dst_daemon == self_) {
        ++stats.transfers;
        stats.bytes += t.bytes();
        stats.bytes_by_route[t.route()] += t.bytes();
      }
    }
    if (interrupt_ != nullptr && interrupt_->raised()) {
      return absl::CancelledError(absl::StrCat("epoch ", epoch, ": interrupted (",
                                               interrupt_->reason(), ") before batch ", b));
    }
    absl::Status status = plan.ordered_batches()
                              ? RunOrdered(resolved, epoch, deadline, &run_memory, &stats)
                              : RunBatch(resolved, b, epoch, deadline, &run_memory, &stats);
    if (status.ok()) status = after_batch(b);
    if (!status.ok()) {
      return absl::Status(status.code(), absl::StrCat("epoch ", epoch, ": ", status.message()));
    }
    for (const Resolved& r : resolved) {
      if (r.src_daemon == self_ && r.transfer->src().kind() == v1::ENDPOINT_RELAY_BUFFER) {
        run_memory.relays.ReadDone(r.transfer->src());
      }
    }
    stats.relay_buffer_peak_bytes = run_memory.relays.peak_bytes();
    stats.relay_buffers_left = run_memory.relays.live_buffers();
    stats.delivered_bytes += batch_delivered;
    const double elapsed = absl::ToDoubleSeconds(absl::Now() - start);
    for (int64_t rank : receivers) stats.destination_finish_seconds[rank] = elapsed;
    if (progress_ && batch_delivered > 0) progress_(stats.delivered_bytes);
  }
  if (sink_ != nullptr) {
    absl::Status finished = sink_->Finish();
    if (!finished.ok()) {
      return absl::Status(finished.code(), absl::StrCat("epoch ", epoch, ": ", finished.message()));
    }
  }
  return stats;
}

StagingPool::Allocator DeviceStagingAllocator() {
  return [](int64_t bytes, int32_t device) -> absl::StatusOr<std::shared_ptr<uint8_t>> {
    absl::StatusOr<std::unique_ptr<gpu::DeviceMemory>> memory =
        gpu::DeviceMemory::Allocate(bytes, device);
    if (!memory.ok()) return memory.status();
    std::shared_ptr<gpu::DeviceMemory> owner = std::move(*memory);
    return std::shared_ptr<uint8_t>(owner, owner->data());
  };
}

}  // namespace refit::transport

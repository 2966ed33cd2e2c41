// Runs one refitd's part of a plan: copies between its own ranks' buffers directly, and
// exchanges the pieces that cross to other daemons: between GPU memory over NCCL (the
// messages gpu::ScheduleStep lays out), otherwise over UCX, packed per (batch, peer) into
// one host staging message each way (from a pool kept across epochs when the caller
// gives one). All of a batch's receives and sends are posted before any is waited on, so
// two daemons sending to each other cannot deadlock; every wait ends at the deadline.
// Ordered plans (gather_broadcast) run transfer by transfer instead, each NCCL piece a
// step of its own.
//
// Threading: one thread runs it at a time (refitd's epoch thread); host copies within a
// batch go to up to SetCopyThreads threads it starts and joins itself; the interrupt may be
// set from any thread and is read at batch and transfer boundaries.
#ifndef REFIT_TRANSPORT_PLAN_EXECUTOR_H_
#define REFIT_TRANSPORT_PLAN_EXECUTOR_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/refit.pb.h"
#include "transport/buffer_map.h"
#include "transport/destination_sink.h"
#include "transport/execution_stats.h"
#include "transport/gpu/device_copy.h"
#include "transport/gpu/nccl_group.h"
#include "transport/gpu/nccl_schedule.h"
#include "transport/host_copies.h"
#include "transport/interrupt.h"
#include "transport/rank_key.h"
#include "transport/rank_placement.h"
#include "transport/relay_buffers.h"
#include "transport/scratch_arena.h"
#include "transport/shared_memory_handoff.h"
#include "transport/staging_pool.h"
#include "transport/ucx_worker.h"

namespace refit::transport {

// How pieces between GPU buffers of different daemons travel: over this daemon's NCCL
// group, each step's messages exactly as gpu::ScheduleStep lays them out (the schedule
// gpu::CheckSchedules proves consistent across daemons).
struct NcclRoute {
  gpu::NcclGroup* group = nullptr;
  gpu::CommunicatorRanks ranks;
  std::set<int32_t> gpus;            // the communicator ranks of this daemon's GPUs
  std::map<int32_t, int> member_of;  // such a communicator rank -> its member index in `group`
};

class PlanExecutor {
 public:
  // `peers[d]` reaches daemon d (null for this daemon, `self`); `worker` owns them and may
  // be null when every rank is local. The run reads source views and writes destination
  // views of `*buffers`; a plan that would write into a source view is refused.
  PlanExecutor(BufferMap* buffers, const RankPlacement& placement, int32_t self, UcxWorker* worker,
               std::vector<UcxEndpoint*> peers)
      : buffers_(*buffers),
        placement_(placement),
        self_(self),
        worker_(worker),
        peers_(std::move(peers)) {}

  // Runs this daemon's transfers of `plan`; `epoch` keeps messages of different epochs
  // apart. Errors name the batch, the tensor and the peer.
  absl::StatusOr<ExecutionStats> Run(const v1::Plan& plan, uint32_t epoch, absl::Time deadline);

  // Instead of Run, for an epoch this daemon will not run (it failed before its data
  // plane started): tells each same-host peer it would have written straight into that it
  // stopped writing there, so that peer's run does not wait for it up to the stall limit.
  // Set up as for Run (WriteStraightInto, UseSharedMemory). Waits at most the stop limit
  // for the words to go out.
  absl::Status SayNotWriting(const v1::Plan& plan, uint32_t epoch);

  // Called after each batch with the bytes this daemon wrote into destination views so far
  // (its own, and peers' it writes straight into; a progress report: summed over daemons
  // it reaches the plan's final bytes).
  void OnProgress(std::function<void(int64_t delivered_bytes)> progress) {
    progress_ = std::move(progress);
  }

  // Once `interrupt` is raised the run stops at the next batch or transfer boundary with
  // CANCELLED (UCX waits end at once when the worker shares the flag).
  void SetInterrupt(const Interrupt* interrupt) { interrupt_ = interrupt; }
  // A batch whose messages to and from peers all stand still this long fails (a dead link
  // the control plane does not see). Ordered plans wait piece by piece on peers that may
  // be busy with earlier pieces for a long time, so there only the deadline applies.
  // However a run ends, it waits (this long, or kDefaultStopLimit without a stall limit)
  // for the word of each same-host peer that writes straight into ranks here that it
  // stopped writing (transport/straight_write_stops.h).
  void SetStallLimit(absl::Duration limit) { stall_limit_ = limit; }
  static constexpr absl::Duration kDefaultStopLimit = absl::Seconds(10);

  // Pieces for bucketed destination ranks go to `sink` (kept by the caller), which is
  // finished after the last batch.
  void UseSink(DestinationSink* sink) { sink_ = sink; }

  // Copies between host memory within this daemon (and straight into same-host peers'
  // ranks) run on up to `threads` threads at once (transport/host_copies.h); 1: on the
  // calling thread only.
  void SetCopyThreads(int threads) { copy_threads_ = std::max(1, threads); }

  // Hashes every piece in host memory at its views as it is packed, copied, unpacked or
  // handed to the sink (ExecutionStats::piece_hashes), for the piece checksums: the bytes
  // are hashed while they are in cache instead of read again after the run.
  void HashPieces(bool hash) { hash_pieces_ = hash; }

  // Messages between daemons are cut into chunks of whole pieces of at most this many
  // bytes (a larger piece is a chunk of its own), sent two rounds at a time: staging holds
  // two chunks per peer and direction, and packing overlaps the wire.
  static constexpr int64_t kDefaultMessageChunkBytes = 16 << 20;
  void SetMessageChunkBytes(int64_t bytes) { message_chunk_bytes_ = std::max<int64_t>(1, bytes); }

  // Called with each host-memory message received from another daemon, before its pieces
  // are unpacked (where refitd's test builds damage an epoch on purpose).
  void OnMessageReceived(std::function<void(uint8_t* message, int64_t bytes)> received) {
    on_message_received_ = std::move(received);
  }

  // Grows the host staging (UseHostStaging) and the shared-memory outbox (UseSharedMemory)
  // now to what `plan`'s largest batch carves from them, so that Run's first epoch faults in
  // no fresh page (touching a new page costs more than copying into a touched one). Configure
  // the executor as for Run first. Nothing for an ordered plan.
  absl::Status Reserve(const v1::Plan& plan);

  // Sends pieces between GPU buffers of different daemons over NCCL instead of UCX.
  void UseNccl(const NcclRoute* route) { nccl_ = route; }

  // GPU staging for NCCL messages comes from `pool` (kept by the caller across epochs)
  // instead of a pool that lives for one Run.
  void UseDeviceStaging(StagingPool* pool) { device_staging_ = pool; }
  // The same for the host staging of messages to and from peers over UCX (HostStagingAllocator:
  // prefaulted, so a warm epoch touches no fresh page).
  void UseHostStaging(StagingPool* pool) { host_staging_ = pool; }

  // Chunks to and from the daemons in `peers` (on this host, sharing /dev/shm: see
  // transport/shared_memory_handoff.h) go through shared memory: outgoing ones are packed
  // into `outbox` and announced by a notice, incoming ones are unpacked straight from the
  // sender's outbox, mapped through `inboxes`. Both are kept by the caller across epochs;
  // both daemons of a pair must agree (each decides from the same domains).
  void UseSharedMemory(std::set<int32_t> peers, SharedMemoryOutbox* outbox,
                       SharedMemoryInboxes* inboxes) {
    shared_memory_peers_ = std::move(peers);
    outbox_ = outbox;
    inboxes_ = inboxes;
  }
  // Destination ranks `ranks` (PlanSlice's shared_destinations: this daemon's own listed
  // too) are shared memory that the daemons of UseSharedMemory's peers map as well. A piece
  // from a view in host memory here (a source's, or a destination's forwarded to a replica)
  // into a view of such a rank on a peer is written straight into the rank's memory through
  // `peer_destinations` (the peers' ranks mapped here, kept by the caller): one copy, no
  // staging, no message, both ends hashed here, as a local copy. A piece from such a peer
  // into such a rank here is the peer's to write and is left alone. Both daemons decide
  // from the same list. Unordered plans only.
  void WriteStraightInto(std::set<int64_t> ranks, BufferMap* peer_destinations) {
    straight_ranks_ = std::move(ranks);
    peer_destinations_ = peer_destinations;
  }

 private:
  // Memory one run creates and frees: full-tensor scratch (gather_broadcast), relay
  // buffers (reshard), and host and GPU staging when the caller keeps none across runs.
  struct RunMemory {
    ScratchArena scratch;
    RelayBuffers relays;
    StagingPool host_staging;
    StagingPool device_staging;
  };
  // Consecutive pieces of one message stream, packed densely one after another.
  struct Chunk {
    std::vector<const v1::Transfer*> pieces;
    int64_t bytes = 0;
  };
  // A stream's chunks are numbered in the low bits of its messages' tags.
  static constexpr int kChunkBits = 10;
  static constexpr int64_t kMaxChunks = int64_t{1} << kChunkBits;
  struct Resolved {
    const v1::Transfer* transfer;
    int32_t src_daemon;
    int32_t dst_daemon;
  };

  // A batch's transfers by the way each takes from or to this daemon.
  struct BatchRoutes {
    std::map<int32_t, std::vector<const v1::Transfer*>> outgoing, incoming;  // by peer
    // Copies here, then pieces this daemon writes straight into same-host peers' ranks.
    std::vector<const v1::Transfer*> local;
    std::vector<const v1::Transfer*> nccl;
    // Pieces same-host peers write straight into ranks here.
    std::vector<const v1::Transfer*> written_by_peers;
    // The bytes written straight to and from each peer.
    std::map<int32_t, int64_t> straight_to, straight_from;
  };
  BatchRoutes RouteBatch(const std::vector<Resolved>& transfers) const;
  // The small messages of a shared-memory stream, two rounds' worth.
  struct Mailbox {
    EncodedNotice notices[2];
    int64_t receipts[2] = {0, 0};
  };
  // One peer's messages in one direction during a batch.
  struct Stream {
    int32_t peer;
    bool outgoing;
    std::vector<Chunk> chunks;
    UcxEndpoint* endpoint = nullptr;  // null without a connection to the peer
    uint8_t* slots[2] = {nullptr, nullptr};
    // Set for a stream through shared memory; kept alive by what UCX may still write.
    std::shared_ptr<Mailbox> mailbox;
  };
  // The streams of a batch's messages (incoming first), cut into chunks, slots not carved.
  std::vector<Stream> StreamsOf(const BatchRoutes& routes) const;
  // The slots `streams` take, in stream order: two of its largest chunk per stream (one when
  // it has a single chunk), from host staging, or from the outbox for an outgoing stream
  // through shared memory (an incoming one unpacks from the sender's outbox: none).
  struct SlotSizes {
    std::vector<int64_t> staging, outbox;
  };
  static SlotSizes SlotSizesOf(const std::vector<Stream>& streams);
  // Each batch's transfers with the daemons at their ends; errors name the batch.
  absl::StatusOr<std::vector<std::vector<Resolved>>> ResolveBatches(const v1::Plan& plan) const;
  // Run's batches, calling `after_batch` after each one that succeeded.
  absl::StatusOr<ExecutionStats> RunResolved(
      const v1::Plan& plan, const std::vector<std::vector<Resolved>>& batches, uint32_t epoch,
      absl::Time deadline, const std::function<absl::Status(int batch)>& after_batch);
  // One batch of an unordered plan, as named stages over what they share (BatchRun, whose
  // PostedOperations own every operation posted: the only place that gives up on them).
  absl::Status RunBatch(const std::vector<Resolved>& transfers, int32_t batch, uint32_t epoch,
                        absl::Time deadline, RunMemory* run_memory, ExecutionStats* stats);
  struct BatchRun;
  // The bytes written straight to and from same-host peers, counted in the stats.
  void CountStraightWrites(BatchRun& run) const;
  // The batch's message streams and their staging slots (host staging, or the outbox).
  absl::Status CarveStreams(BatchRun& run);
  // Receives of the words of same-host peers that write straight into ranks here.
  absl::Status PostWordsOfPeers(BatchRun& run);
  // Round `r`: a receive per incoming stream, a packed send per outgoing one.
  absl::Status PostRound(BatchRun& run, size_t r);
  // The batch's local copies (and its pieces written straight into same-host peers' ranks).
  absl::Status CopyLocally(BatchRun& run);
  // Tells each same-host peer how many bytes were written straight into its ranks.
  absl::Status SayWrittenStraight(BatchRun& run);
  // Posts round r + 1 into the slots round r - 1 freed, waits for round `r` and unpacks it.
  absl::Status FinishRound(BatchRun& run, size_t r);
  // Unpacks round `r`'s chunk of incoming `stream` (`received_bytes` on the wire) and,
  // through shared memory, answers it with a receipt.
  absl::Status Unpack(BatchRun& run, const Stream& stream, size_t r, int64_t received_bytes);
  // Waits for everything still posted and checks the peers' words of straight writes.
  absl::Status Drain(BatchRun& run);
  // `list` (one peer's pieces in plan order) cut into chunks of whole pieces: at most
  // message_chunk_bytes_ each unless one piece is larger, and at most kMaxChunks of them
  // (the limit grows when it would take more).
  std::vector<Chunk> CutIntoChunks(const std::vector<const v1::Transfer*>& list) const;
  // Bytes of `list`'s pieces packed densely one after another.
  int64_t PackedBytes(const std::vector<const v1::Transfer*>& list) const;
  // Packs `list`'s pieces from their source views into `staging` (on CUDA device
  // `staging_device`, -1: host), densely in list order, or unpacks them from it into their
  // destination views.
  absl::Status CopyPieces(const std::vector<const v1::Transfer*>& list, uint8_t* staging,
                          int32_t staging_device, bool pack, RunMemory* run_memory,
                          ExecutionStats* stats);
  // True when transfer `t` goes over the NCCL group.
  bool ViaNccl(const v1::Transfer& t) const;
  // Runs one step (`step_name`: "batch 3", "transfer 7") of NCCL messages: `transfers` are
  // the step's pieces over NCCL that touch this daemon, in plan order; what is issued is
  // gpu::ScheduleStep's messages for this daemon's GPUs, in its order.
  absl::Status RunNcclStep(const std::vector<const v1::Transfer*>& transfers,
                           const std::string& step_name, absl::Time deadline, RunMemory* run_memory,
                           ExecutionStats* stats);
  absl::Status RunOrdered(const std::vector<Resolved>& transfers, uint32_t epoch,
                          absl::Time deadline, RunMemory* run_memory, ExecutionStats* stats);
  // Where transfer `t`'s endpoint is read (`LocateSource`) or written (`LocateDestination`):
  // a view of a rank here, or the run's scratch or relay memory.
  absl::StatusOr<ConstStridedRef> LocateSource(const v1::Endpoint& endpoint, const v1::Transfer& t,
                                               RunMemory* run_memory) const;
  absl::StatusOr<StridedRef> LocateDestination(const v1::Endpoint& endpoint, const v1::Transfer& t,
                                               RunMemory* run_memory);
  absl::StatusOr<StridedRef> LocateRunMemory(const v1::Endpoint& endpoint, const v1::Transfer& t,
                                             RunMemory* run_memory) const;
  // Transfer `t` as a copy between host memory (RunHostCopies): from its source endpoint,
  // or from host staging `staged_from` (unpacking), into its destination endpoint, or into
  // host staging `staged_to` (packing); the ends at views hashed as HashPieces asks.
  // Nothing when an end is GPU memory or the sink takes the piece.
  absl::StatusOr<std::optional<HostCopy>> HostCopyOf(
      const v1::Transfer& t, const std::optional<ConstStridedRef>& staged_from,
      const std::optional<StridedRef>& staged_to, RunMemory* run_memory);
  // Runs `copies` (of `transfers`, one each) on the copy threads and records their hashes
  // and runs; the first failure names its transfer.
  absl::Status RunHostCopiesOf(std::vector<HostCopy>* copies,
                               const std::vector<const v1::Transfer*>& transfers,
                               ExecutionStats* stats);
  // Issues the copy of local transfer `t` on `copies` (waited for by the caller).
  absl::Status CopyLocal(const v1::Transfer& t, RunMemory* run_memory, ExecutionStats* stats,
                         gpu::DeviceCopyChain* copies);
  // Writes transfer `t`'s box, read from `from`, where its destination endpoint is: its
  // memory (a copy issued on `copies`), or the sink for a bucketed rank (at once, after
  // waiting for `copies`). `from_source_end`: `from` is `t`'s source endpoint itself (a
  // local copy), not staging, so with HashPieces its hash is that end's too.
  absl::Status WriteDestination(const v1::Transfer& t, const ConstStridedRef& from,
                                bool from_source_end, RunMemory* run_memory, ExecutionStats* stats,
                                gpu::DeviceCopyChain* copies);
  UcxEndpoint* PeerOf(int32_t daemon) const;
  // Whether `r` is a piece one daemon of a same-host pair writes straight into the other's
  // destination rank (WriteStraightInto), as both ends of it decide.
  bool WrittenStraight(const Resolved& r) const;
  // Whether `r` counts as delivered by this daemon: written into one of its destination
  // views by it, or straight into a peer's by it.
  bool DeliveredHere(const Resolved& r) const;

  BufferMap& buffers_;
  const RankPlacement& placement_;
  const int32_t self_;
  UcxWorker* worker_;
  std::vector<UcxEndpoint*> peers_;
  std::function<void(int64_t)> progress_;
  std::function<void(uint8_t*, int64_t)> on_message_received_;
  const Interrupt* interrupt_ = nullptr;
  absl::Duration stall_limit_ = absl::InfiniteDuration();
  const NcclRoute* nccl_ = nullptr;
  StagingPool* device_staging_ = nullptr;
  StagingPool* host_staging_ = nullptr;
  std::set<int32_t> shared_memory_peers_;
  SharedMemoryOutbox* outbox_ = nullptr;
  SharedMemoryInboxes* inboxes_ = nullptr;
  // The same-host peers this daemon writes straight into in `batches`, with the last batch
  // that does, and the peers that write straight into ranks here.
  struct StraightWriteParties {
    std::map<int32_t, int> last_batch_writing_to;
    std::set<int32_t> writers;
  };
  StraightWriteParties PartiesOf(const std::vector<std::vector<Resolved>>& batches) const;
  absl::Duration StopLimit() const;
  uint64_t StoppedWritingTag(uint32_t epoch, int32_t writer) const;

  std::set<int64_t> straight_ranks_;
  BufferMap* peer_destinations_ = nullptr;
  bool ordered_run_ = false;  // the plan being run has ordered batches
  DestinationSink* sink_ = nullptr;
  bool hash_pieces_ = false;
  int copy_threads_ = 1;
  int64_t message_chunk_bytes_ = kDefaultMessageChunkBytes;
};

// Device memory for a StagingPool (cudaMalloc); UNIMPLEMENTED without CUDA in the build.
StagingPool::Allocator DeviceStagingAllocator();

}  // namespace refit::transport

#endif  // REFIT_TRANSPORT_PLAN_EXECUTOR_H_

// Runs refitd's part of one epoch and says how it went: holds the registry's buffers for
// the epoch, joins the NCCL group when the slice has one, connects to the daemons the slice
// exchanges pieces with, runs the plan executor (progress through a callback), hashes what
// the checksums cover, and returns the EpochDone to report. Owns the host data plane (UCX
// worker and peers) and the NCCL membership. No gRPC: CoordinatorLink hands it the
// coordinator's commands and sends its answers. Used by one thread at a time (refitd's
// epoch thread), except EnsureWorker, also called once before that thread starts.
#ifndef REFIT_REFITD_EPOCH_EXECUTOR_H_
#define REFIT_REFITD_EPOCH_EXECUTOR_H_

#include <cstdint>
#include <functional>
#include <set>
#include <string>

#include "daemon/metrics.h"
#include "proto/refit.pb.h"
#include "refitd/data_plane_endpoint.h"
#include "refitd/nccl_membership.h"
#include "refitd/rank_registry.h"
#include "transport/buffer_map.h"
#include "transport/interrupt.h"
#include "transport/peer_destinations.h"
#include "transport/shared_memory_handoff.h"
#include "transport/staging_pool.h"

namespace refit::daemon {

class EpochExecutor {
 public:
  // `interrupt` stops a running epoch (the coordinator's abort, refitd stopping);
  // `stopping` says it was refitd stopping, for the report. `on_new_address` runs with the
  // address of every UCX worker made. `metrics` may be null.
  EpochExecutor(std::string node, RankRegistry* registry, DaemonMetrics* metrics,
                const transport::Interrupt* interrupt, const transport::Interrupt* stopping,
                std::function<void(const std::string& address)> on_new_address);
  ~EpochExecutor();

  // Peers whose DaemonPeer says this `domain` (non-empty) get and give chunks through
  // shared memory (transport/shared_memory_handoff.h); "" (the default): none do.
  void ShareMemoryWithin(std::string domain) { shared_memory_domain_ = std::move(domain); }

  // Maps same-host peers' destination ranks (the coordinator's list) ahead of the epochs
  // that write straight into them; what cannot be mapped now is logged (the epoch maps it
  // again, and fails if it still cannot). Ignored without a domain.
  void MapPeerDestinations(const v1::LayoutSpec& ranks);

  // Threads the plan executor copies between host memory with (PlanExecutor::SetCopyThreads).
  void SetCopyThreads(int threads) { copy_threads_ = threads; }

  // Makes the UCX worker if there is none; false if it cannot (logged).
  bool EnsureWorker() { return data_plane_.EnsureWorker(); }

  // Sets up now, between epochs, what the epochs of `slice` need and keep (connections to
  // the daemons it exchanges pieces with, host staging and the shared-memory outbox at its
  // largest batch's size), so that its first epoch costs what a later one does. Once per
  // slice (OK at once for the slice already prepared); what fails is logged, returned and
  // left to the epoch (which fails or succeeds as without).
  absl::Status Prepare(const std::shared_ptr<const v1::PlanSlice>& slice);

  using Progress = std::function<void(int64_t delivered_bytes)>;
  // Runs `execute` with `slice` (null: none was received) and returns the report: ok with
  // the checksums and each destination rank's finish time, or the failure with its kind
  // (FAILED_PRECONDITION for a missing slice or a truncated segment, UNAVAILABLE without a
  // data plane, CANCELLED when interrupted, the data plane's own otherwise).
  v1::EpochDone Run(const v1::ExecuteEpoch& execute,
                    const std::shared_ptr<const v1::PlanSlice>& slice, const Progress& progress);

 private:
  // What every epoch of one slice derives from it alike, kept until another slice comes
  // (a warm epoch of a large group would otherwise place every rank of it again).
  struct SliceFacts {
    std::shared_ptr<const v1::PlanSlice> slice;  // held: its address names it
    transport::RankPlacement placement;
    std::set<int64_t> destinations_here;  // the slice's destination ranks on this daemon
    std::set<int32_t> exchanged_with;     // the daemons its pieces go to or come from
  };
  // The facts of `slice` (not null), derived again only for another slice.
  const SliceFacts& FactsOf(const std::shared_ptr<const v1::PlanSlice>& slice);
  v1::EpochDone Execute(const v1::ExecuteEpoch& execute, const SliceFacts& facts,
                        transport::BufferMap* buffers, const Progress& progress);
  // Gives `executor` the memory kept across epochs: the host staging and, with peers of
  // this daemon's shared-memory domain in `slice`, the outbox, the inboxes and the peers'
  // ranks to write straight into (mapped now if not yet; an error if they cannot be, with
  // the executor told of them as listed, so it can say it will not write into them).
  absl::Status UseKeptMemory(const v1::PlanSlice& slice, const transport::RankPlacement& placement,
                             transport::PlanExecutor* executor);
  // `failed`, after telling the same-host peers `executor` would have written straight into
  // that it will not (they would otherwise wait for it up to the stall limit).
  v1::EpochDone FailBeforeRun(transport::PlanExecutor* executor, const v1::Plan& plan,
                              uint32_t epoch_number, v1::EpochDone failed);
  // Quantizes the slice's views of `role`'s ranks: source views before the data plane,
  // destination views received wide after it (BufferMap::SendQuantized/ReceiveQuantized
  // already made their memory); counted in the metrics.
  absl::Status Quantize(v1::Role role, const v1::PlanSlice& slice, transport::BufferMap* buffers);
  // The codes and scales of quantized source views held now, for the metrics.
  void RecordQuantizedMemory(const transport::BufferMap& buffers);
  // The host staging and outbox held now, for the metrics.
  void RecordKeptMemory();
  // The registrations of this daemon's ranks of one side.
  std::vector<v1::RankRegistration> RegistrationsOf(v1::Role role) const;
  void RecordStats(const std::string& epoch_id, const v1::PlanSlice& slice,
                   const transport::ExecutionStats& stats);

  const std::string node_;
  RankRegistry* registry_;
  DaemonMetrics* metrics_;
  const transport::Interrupt* interrupt_;
  const transport::Interrupt* stopping_;
  DataPlaneEndpoint data_plane_;
  NcclMembership nccl_;
  // Host staging of messages to and from other daemons, kept across epochs (the largest
  // batch's, bounded by the staging budget): a warm epoch allocates and faults in nothing.
  transport::StagingPool host_staging_{transport::HostStagingAllocator()};
  // Chunks to and from daemons of this host: the outbox this daemon packs into and the
  // peers' outboxes it maps, both kept across epochs.
  std::string shared_memory_domain_;
  int copy_threads_ = 1;
  transport::SharedMemoryOutbox outbox_;
  transport::SharedMemoryInboxes inboxes_;
  // The destination ranks of daemons of this host that pieces go straight into.
  transport::PeerDestinations peer_destinations_;
  SliceFacts facts_;
  std::shared_ptr<const v1::PlanSlice> prepared_;  // the last slice Prepare set up for
};

}  // namespace refit::daemon

#endif  // REFIT_REFITD_EPOCH_EXECUTOR_H_

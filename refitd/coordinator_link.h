// refitd's side of the control plane: one control stream to the coordinator, reconnected
// after failures, with heartbeats within the coordinator's lease. It introduces the daemon
// (node, UCX worker address), forwards rank registrations, and on the coordinator's word
// hands epochs to the EpochExecutor (refitd/epoch_executor.h: the data plane) and commits
// or aborts versions in the registry. Each epoch runs on its own thread while the control
// stream keeps reading, so the coordinator's abort (or SIGTERM) interrupts it mid-flight;
// the interrupted epoch is still reported to the coordinator.
#ifndef REFIT_REFITD_COORDINATOR_LINK_H_
#define REFIT_REFITD_COORDINATOR_LINK_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "daemon/metrics.h"
#include "proto/refit.grpc.pb.h"
#include "refitd/epoch_executor.h"
#include "refitd/epoch_queue.h"
#include "refitd/rank_registry.h"
#include "security/grpc_security.h"
#include "transport/interrupt.h"

namespace refit::daemon {

class CoordinatorLink {
 public:
  static std::string NewIncarnation();

  // `metrics` may be null.
  CoordinatorLink(std::string coordinator, std::string node, RankRegistry* registry,
                  DaemonMetrics* metrics = nullptr)
      : coordinator_(std::move(coordinator)),
        node_(std::move(node)),
        registry_(registry),
        metrics_(metrics),
        incarnation_(NewIncarnation()) {}

  // TLS and token for the control stream (set before Start; default: plaintext, no token).
  void SetSecurity(security::ClientSecurity security) { security_ = std::move(security); }
  // What the daemon tells the coordinator about its GPUs (set before Start).
  void SetGpuDescription(std::string gpu) { gpu_ = std::move(gpu); }
  // This host's shared-memory domain (transport::SharedMemoryDomain; "": chunks to daemons
  // of this host go over UCX like any other), said in the hello (set before Start).
  void SetSharedMemoryDomain(std::string domain) { shared_memory_domain_ = std::move(domain); }
  // Threads the data plane copies between host memory with (set before Start).
  void SetCopyThreads(int threads) { copy_threads_ = threads; }
  ~CoordinatorLink() { Stop(); }

  void Start();
  void Stop();
  bool connected() const { return connected_; }
  // The coordinator welcomed the current session (its answers to registrations will come).
  bool welcomed() const { return connected_ && welcomed_; }
  // New for every link: what fences this daemon's sessions from its earlier lives.
  const std::string& incarnation() const { return incarnation_; }

 private:
  using Stream = grpc::ClientReaderWriter<v1::DaemonMessage, v1::CoordinatorMessage>;

  void Run();
  // Sends a heartbeat every quarter of the coordinator's lease while connected.
  void Heartbeat();
  // One control-stream session; returns when the stream ends.
  void Session();
  // Opens a session: the hello (with an epoch in doubt, if any), then every registration
  // and publish the registry holds. False if the stream broke.
  bool SayHello(Stream* stream);
  // The coordinator's commands.
  void OnExecute(const v1::ExecuteEpoch& execute);
  void OnAbort(const v1::AbortEpoch& abort);
  void OnCommit(const v1::CommitEpoch& commit);
  // Tells the engines of the ranks asked to pause (on a thread of its own: the wait lasts
  // up to the request's deadline) and answers RanksPaused.
  void OnPause(const v1::PauseRanks& pause);
  // The stream ended: the epoch ends with it; one never reported done is aborted here, one
  // reported done stays in doubt until a coordinator settles it.
  void EndSession();
  bool Write(const v1::DaemonMessage& message);
  // Logs a connection problem once, not at every retry, until a different one comes.
  void WarnOnce(const std::string& problem);
  // On the epoch thread between epochs: maps the latest peer destinations, if any came.
  void MapPeerDestinations();
  // Runs the epoch (EpochExecutor) and reports it to the coordinator.
  void RunEpoch(const v1::ExecuteEpoch& execute, const std::shared_ptr<const v1::PlanSlice>& slice);

  const std::string coordinator_;
  const std::string node_;
  std::string gpu_;
  std::string shared_memory_domain_;
  int copy_threads_ = 1;
  security::ClientSecurity security_;
  RankRegistry* registry_;
  DaemonMetrics* metrics_;
  const std::string incarnation_;
  std::thread thread_;
  std::thread heartbeat_thread_;
  std::thread pauser_;  // the last OnPause's wait (run by the stream's reader thread only)
  // Raised once by Stop: ends the reconnect backoff and the heartbeat's sleep at once.
  transport::Interrupt stopping_;
  std::atomic<int64_t> lease_ms_{5000};  // from the coordinator's Welcome
  std::atomic<bool> connected_{false};
  std::atomic<bool> welcomed_{false};
  // Raised to stop the running epoch (with why); the UCX worker and the executor both
  // watch it. Cleared as the next epoch is submitted.
  transport::Interrupt interrupt_;
  // Made by Start, gone after Stop. The executor is used by the epoch thread only (and by
  // Start for the first UCX worker).
  std::unique_ptr<EpochExecutor> executor_;
  std::unique_ptr<EpochQueue> epochs_;

  absl::Mutex mu_;
  grpc::ClientContext* context_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::string data_plane_address_ ABSL_GUARDED_BY(mu_);  // the UCX worker's, for the hello
  Stream* stream_ ABSL_GUARDED_BY(mu_) = nullptr;

  std::string running_epoch_ ABSL_GUARDED_BY(mu_);
  // The last epoch this daemon was told to execute: an abort of it may have left partial
  // writes in the destination ranks' buffers.
  std::string executed_epoch_ ABSL_GUARDED_BY(mu_);  // cleared once committed or aborted
  int64_t executed_version_ ABSL_GUARDED_BY(mu_) = -1;
  // The executed epoch finished here and was reported done: from then on only the
  // coordinator may settle it (a lost stream leaves it in doubt, said in the next hello),
  // since it may have committed it on other daemons already.
  bool executed_reported_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::string> executed_destination_nodes_ ABSL_GUARDED_BY(mu_);
  std::string committed_epoch_ ABSL_GUARDED_BY(mu_);  // the last epoch committed here
  std::string in_doubt_said_ ABSL_GUARDED_BY(mu_);    // the epoch in doubt last logged
  // The coordinator's latest list of same-host peers' destination ranks, not yet mapped
  // (the epoch thread maps it between epochs).
  std::shared_ptr<const v1::LayoutSpec> peer_destinations_ ABSL_GUARDED_BY(mu_);
  // The latest plan slice, for the epoch thread to prepare for between epochs.
  std::shared_ptr<const v1::PlanSlice> slice_to_prepare_ ABSL_GUARDED_BY(mu_);

  // Owned by the link's thread.
  std::shared_ptr<const v1::PlanSlice> slice_;
  std::string last_stream_error_;  // what WarnOnce said last
  uint32_t last_epoch_number_ = 0;
};

}  // namespace refit::daemon

#endif  // REFIT_REFITD_COORDINATOR_LINK_H_

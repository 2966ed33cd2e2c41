// The coordinator's registry of a refit group: the daemons connected over control streams
// (each with a channel to send it messages) and the ranks they registered. A snapshot turns
// the registrations into the two LayoutSpecs and the rank placement a plan needs.
//
// Threading: every method may be called from any thread (each daemon's control-stream
// handler, the lease thread, EpochRunner's refit and preparer threads); one mutex guards
// all of it, and Cluster calls nothing of EpochRunner, so it may be called with
// EpochRunner's lock held.
#ifndef REFIT_COORDINATOR_CLUSTER_H_
#define REFIT_COORDINATOR_CLUSTER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/in_doubt_resolution.h"
#include "proto/refit.pb.h"
#include "transport/rank_key.h"
#include "transport/rank_placement.h"

namespace refit::daemon {

// Sends coordinator messages to one daemon (its control stream). False once it is gone.
class DaemonChannel {
 public:
  virtual ~DaemonChannel() = default;
  virtual bool Send(const v1::CoordinatorMessage& message) = 0;
  // Ends the stream from the coordinator's side (fencing, an expired lease).
  virtual void Cut() {}
  // How long the Send in flight has waited for the daemon to read (zero: none is).
  virtual absl::Duration WriteBlockedFor(absl::Duration now) { return absl::ZeroDuration(); }
};

// One control stream of one daemon: its index and which of the node's sessions it is.
// Only the newest session of a node may act; older ones are fenced.
struct DaemonSession {
  int32_t index = -1;
  int64_t generation = 0;
};

struct ClusterSnapshot {
  v1::LayoutSpec sources;
  v1::LayoutSpec destinations;
  std::vector<v1::RankPlacement> placement;
  std::vector<v1::DaemonPeer> daemons;
  std::map<int32_t, std::shared_ptr<DaemonChannel>> channels;  // by daemon index
  // Destination rank -> the registration that holds it now (new at every registration): a
  // version committed to one membership is not there for a rank registered since.
  std::map<int64_t, uint64_t> destination_registrations;
  // Source rank -> the registration that holds it now: a trainer restarted since a commit
  // holds memory (and weights) that the commit did not come from.
  std::map<int64_t, uint64_t> source_registrations;
  // Destination ranks a same-host daemon may write straight into (PlanSlice's
  // shared_destinations): in host shared memory, neither staged nor bucketed, on a daemon
  // with a shared-memory domain; their layouts as registered (segment names kept).
  std::map<int64_t, v1::RankLayout> shared_destinations;
  // Source views quantized before they are sent (planner::SendQuantized, by PlanEpoch,
  // which also makes `sources` the layout as sent).
  std::vector<v1::QuantizedSource> quantized_sources;
  // Destination views quantized on arrival (planner::ReceiveQuantized, by PlanEpoch, which
  // makes `destinations` the layout as received).
  std::vector<v1::QuantizedSource> quantized_on_arrival;
  // The oldest and newest versions the source ranks have published (-1: none).
  int64_t published_oldest = -1;
  int64_t published_newest = -1;
  // Each destination rank's registration as its daemon sent it (shared, not copied).
  std::map<int64_t, std::shared_ptr<const v1::RankRegistration>> destination_declarations;
  // Destination ranks declare a tensor differently (a Snapshot taken with replicas):
  // `destinations.tensors` holds the first declaration of each, until NarrowDestinations
  // keeps replicas that agree.
  bool destinations_disagree = false;
};

// Which daemon serves each rank of `snapshot`.
transport::RankPlacement WhereRanksAre(const ClusterSnapshot& snapshot);

// Whether two declarations of a tensor agree (dtype, shape and quantization).
bool SameTensor(const v1::TensorSpec& a, const v1::TensorSpec& b);

class Cluster {
 public:
  // A daemon said hello. Its index is reused when the node reconnects. A session of the
  // node still open (an older incarnation, or a stream not yet seen broken) is fenced: its
  // ranks leave, its stream is cut and whatever it sends from now on is ignored;
  // `*superseded` says so.
  // A hello from an incarnation that a newer one of its node replaced is refused
  // (FAILED_PRECONDITION), so a stale daemon cannot take the node back.
  absl::StatusOr<DaemonSession> AddDaemon(const v1::DaemonHello& hello,
                                          std::shared_ptr<DaemonChannel> channel,
                                          bool* superseded = nullptr);
  // The session's stream ended: it and its ranks leave the group (if it is still current).
  void RemoveDaemon(const DaemonSession& session);
  // Each fails (FAILED_PRECONDITION) for a fenced session. A registration can hold
  // hundreds of thousands of strings: it is taken by value and kept as one immutable copy,
  // so neither this call nor a snapshot copies or frees it while holding the registry's lock
  // (the lock every lease renewal takes).
  absl::Status AddRank(const DaemonSession& session, v1::RankRegistration registration);
  absl::Status RemoveRank(const DaemonSession& session, v1::Role role, int64_t rank);
  absl::Status MarkPublished(const DaemonSession& session, int64_t source_rank, int64_t version);
  // The session was heard from now; false when it is fenced. `handling`: the coordinator
  // now works on the message it sent (checking and storing a registration of tens of MB
  // takes seconds on a loaded host), during which its lease does not run: that time is
  // the coordinator's, not the daemon's silence. The next Touch ends it.
  bool Touch(const DaemonSession& session, bool handling = false);
  bool IsCurrent(const DaemonSession& session) const;
  // Cuts the stream of every current session silent for longer than `lease` at `now`
  // (MonotonicNow()), or whose daemon has left a message unread for that long (it may
  // heartbeat, but a Refit sending it its plan would wait as long as it lives); returns
  // what was cut and why, for the log.
  std::vector<std::string> CutExpired(absl::Duration now, absl::Duration lease);
  // Forgets the daemons disconnected for longer than `after` at `now` (MonotonicNow()),
  // unless in doubt about an epoch (a coordinator may still have to settle it); returns
  // their nodes. A node that comes back later is a new member.
  std::vector<std::string> ForgetGone(absl::Duration now, absl::Duration after);
  // The newest version the daemons say they committed (-1: none), for a restarted
  // coordinator.
  int64_t CommittedVersion() const;
  // The highest epoch number the daemons said they ran (0: none).
  uint32_t LastEpochNumber() const;

  // A connected daemon whose hello named an epoch in doubt not settled since.
  struct InDoubtDaemon {
    int32_t index = -1;
    std::string node;
    v1::InDoubtEpoch epoch;
    std::shared_ptr<DaemonChannel> channel;
  };
  std::vector<InDoubtDaemon> InDoubtDaemons() const;
  // What every node that said hello to this coordinator said last.
  std::vector<NodeWord> NodeWords() const;
  // The daemon's epoch in doubt `epoch_id` was settled; a commit counts as its committed
  // version and epoch from now on.
  void SettleInDoubt(int32_t daemon, const std::string& epoch_id, bool committed);

  // Waits until every registered source rank has published `version` (or a later one);
  // returns the ranks still missing at the deadline (empty: all published).
  std::vector<int64_t> AwaitPublished(int64_t version, absl::Time deadline) const;
  // The oldest and newest versions the source ranks published ({-1, -1}: no source rank).
  std::pair<int64_t, int64_t> PublishedRange() const;

  // The registrations as layouts; errors when two ranks of a side disagree about a tensor.
  // With `destination_replicas` the destination ranks may disagree (the replicas an epoch
  // writes are chosen among those that agree: coordinator/replica_vetting.h); the snapshot says
  // so instead.
  absl::StatusOr<ClusterSnapshot> Snapshot(bool destination_replicas = false) const;
  // For each connected daemon of daemon `daemon`'s shared-memory domain (none without
  // one): its channel, and the destination ranks of the domain's other daemons that it may
  // write straight into (ClusterSnapshot::shared_destinations), with the tensors they hold.
  struct PeerDestinationList {
    std::shared_ptr<DaemonChannel> channel;
    v1::LayoutSpec ranks;
  };
  std::vector<PeerDestinationList> PeerDestinationsAround(int32_t daemon) const;
  // The channel of each connected daemon's current session, by daemon index.
  std::map<int32_t, std::shared_ptr<DaemonChannel>> Channels() const;
  std::vector<std::string> DaemonNames() const;
  // What each daemon said of its GPUs, in DaemonNames order.
  std::vector<std::string> DaemonGpus() const;
  // The node of daemon `daemon` ("daemon N" if unknown), for messages.
  std::string NodeOf(int32_t daemon) const;
  int64_t RankCount(v1::Role role) const;
  // Each registered destination rank: the node of its daemon and its registration (new at
  // every registration), without copying layouts.
  struct DestinationRank {
    std::string node;
    uint64_t registration = 0;
    int64_t held_version = 0;  // as its daemon said when it registered it (0: none)
  };
  std::map<int64_t, DestinationRank> DestinationRanks() const;
  // Waits until each daemon of `daemons` has been heard from after `since` (MonotonicNow())
  // or is no longer connected, or until `deadline`: after a failure, what the group lost is
  // known once every daemon either spoke again or is gone.
  void AwaitHeardSince(const std::set<int32_t>& daemons, absl::Duration since,
                       absl::Time deadline) const;
  // The incarnation of the node's current session ("" if none is connected).
  std::string IncarnationOf(const std::string& node) const;

 private:
  struct DaemonRecord {
    v1::DaemonPeer peer;
    std::string gpu;
    std::string incarnation;
    std::shared_ptr<DaemonChannel> channel;
    bool connected = false;
    int64_t generation = 0;
    absl::Duration last_heard;       // MonotonicNow()
    bool handling = false;           // the coordinator is working on its last message
    absl::Duration disconnected_at;  // MonotonicNow(), once not connected
    int64_t committed_version = -1;
    uint32_t last_epoch_number = 0;
    std::string committed_epoch_id;
    v1::InDoubtEpoch in_doubt;  // epoch_id "": none
  };
  bool IsCurrentLocked(const DaemonSession& session) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  using Registration = std::shared_ptr<const v1::RankRegistration>;
  // Removes the daemon's ranks and returns their registrations, for the caller to free once
  // it has released the lock.
  std::vector<Registration> DropRanksLocked(int32_t daemon) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  struct RankRecord {
    int32_t daemon = 0;
    Registration registration;
    int64_t published = -1;
    uint64_t registration_id = 0;
  };

  mutable absl::Mutex mu_;
  std::map<int32_t, DaemonRecord> daemons_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int32_t> index_of_node_ ABSL_GUARDED_BY(mu_);
  int32_t next_index_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<transport::RankKey, RankRecord> ranks_ ABSL_GUARDED_BY(mu_);
  int64_t generations_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t registrations_ ABSL_GUARDED_BY(mu_) = 0;
  // Per node, the incarnations a newer one replaced (the latest few).
  std::map<std::string, std::vector<std::string>> fenced_ ABSL_GUARDED_BY(mu_);
};

}  // namespace refit::daemon

#endif  // REFIT_COORDINATOR_CLUSTER_H_

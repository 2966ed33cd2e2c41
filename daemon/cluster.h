// The coordinator's registry of a refit group: the daemons connected over control streams
// (each with a channel to send it messages) and the ranks they registered. A snapshot turns
// the registrations into the two LayoutSpecs and the rank placement a plan needs.
#ifndef REFIT_DAEMON_CLUSTER_H_
#define REFIT_DAEMON_CLUSTER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/refit.pb.h"

namespace refit::daemon {

// Sends coordinator messages to one daemon (its control stream). False once it is gone.
class DaemonChannel {
 public:
  virtual ~DaemonChannel() = default;
  virtual bool Send(const v1::CoordinatorMessage& message) = 0;
};

struct ClusterSnapshot {
  v1::LayoutSpec sources;
  v1::LayoutSpec destinations;
  std::vector<v1::RankPlacement> placement;
  std::vector<v1::DaemonPeer> daemons;
  std::map<int32_t, std::shared_ptr<DaemonChannel>> channels;  // by daemon index
};

class Cluster {
 public:
  // A daemon said hello; returns its index (reused when the node reconnects).
  int32_t AddDaemon(const v1::DaemonHello& hello, std::shared_ptr<DaemonChannel> channel);
  // The daemon's stream ended: it and its ranks leave the group.
  void RemoveDaemon(int32_t daemon);
  absl::Status AddRank(int32_t daemon, const v1::RankRegistration& registration);
  void RemoveRank(int32_t daemon, v1::Role role, int64_t rank);
  void MarkPublished(int32_t daemon, int64_t source_rank, int64_t version);

  // Waits until every registered source rank has published `version` (or a later one);
  // returns the ranks still missing at the deadline (empty: all published).
  std::vector<int64_t> AwaitPublished(int64_t version, absl::Time deadline) const;

  // The registrations as layouts; errors when two daemons disagree about a tensor.
  absl::StatusOr<ClusterSnapshot> Snapshot() const;
  std::vector<std::string> DaemonNames() const;
  // What each daemon said of its GPUs, in DaemonNames order.
  std::vector<std::string> DaemonGpus() const;
  // The node of daemon `daemon` ("daemon N" if unknown), for messages.
  std::string NodeOf(int32_t daemon) const;
  int64_t RankCount(v1::Role role) const;

 private:
  struct DaemonRecord {
    v1::DaemonPeer peer;
    std::string gpu;
    std::shared_ptr<DaemonChannel> channel;
    bool connected = false;
  };
  struct RankRecord {
    int32_t daemon = 0;
    v1::RankRegistration registration;
    int64_t published = -1;
  };

  mutable absl::Mutex mu_;
  std::map<int32_t, DaemonRecord> daemons_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int32_t> index_of_node_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<int, int64_t>, RankRecord> ranks_ ABSL_GUARDED_BY(mu_);
};

}  // namespace refit::daemon

#endif  // REFIT_DAEMON_CLUSTER_H_

#include "coordinator/cluster.h"

#include <algorithm>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "daemon/monotonic_clock.h"

namespace refit::daemon {
namespace {

using transport::RankName;

// Whether a destination rank's memory is host shared memory a same-host daemon can map and
// write straight into: neither staged (the data plane writes refitd's shadow) nor
// bucketed (refitd's bucket), every buffer a named segment.
bool WritableStraight(const v1::RankLayout& layout) {
  return !layout.staged() && !layout.bucketed() && layout.buffers_size() > 0 &&
         std::all_of(layout.buffers().begin(), layout.buffers().end(),
                     [](const v1::BufferSpec& b) { return !b.shm_name().empty(); });
}

}  // namespace

transport::RankPlacement WhereRanksAre(const ClusterSnapshot& snapshot) {
  transport::RankPlacement where;
  for (const v1::RankPlacement& p : snapshot.placement) where.Place(p.role(), p.rank(), p.daemon());
  return where;
}

bool SameTensor(const v1::TensorSpec& a, const v1::TensorSpec& b) {
  return a.dtype() == b.dtype() &&
         std::equal(a.shape().begin(), a.shape().end(), b.shape().begin(), b.shape().end()) &&
         a.quantization().SerializeAsString() == b.quantization().SerializeAsString();
}

absl::StatusOr<DaemonSession> Cluster::AddDaemon(const v1::DaemonHello& hello,
                                                 std::shared_ptr<DaemonChannel> channel,
                                                 bool* superseded) {
  std::shared_ptr<DaemonChannel> fenced;
  std::vector<Registration> dropped;
  DaemonSession session;
  {
    absl::MutexLock lock(&mu_);
    std::vector<std::string>& replaced = fenced_[hello.node()];
    if (!hello.incarnation().empty() &&
        std::find(replaced.begin(), replaced.end(), hello.incarnation()) != replaced.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat("refitd on ", hello.node(), " incarnation ", hello.incarnation(),
                       " was replaced by a newer incarnation of the node; restart it to rejoin"));
    }
    // Indexes are never reused (a forgotten node that comes back gets a new one).
    auto [it, inserted] = index_of_node_.emplace(hello.node(), next_index_);
    if (inserted) ++next_index_;
    DaemonRecord& record = daemons_[it->second];
    if (superseded != nullptr) *superseded = record.connected;
    if (record.connected) {
      fenced = std::move(record.channel);
      dropped = DropRanksLocked(it->second);
    }
    if (!record.incarnation.empty() && record.incarnation != hello.incarnation()) {
      replaced.push_back(record.incarnation);
      if (replaced.size() > 16) replaced.erase(replaced.begin());
    }
    record.peer.set_index(it->second);
    record.peer.set_node(hello.node());
    record.peer.set_data_plane_address(hello.data_plane_address());
    record.peer.set_shared_memory_domain(hello.shared_memory_domain());
    record.gpu = hello.gpu();
    record.incarnation = hello.incarnation();
    record.channel = std::move(channel);
    record.connected = true;
    record.generation = ++generations_;
    record.last_heard = MonotonicNow();
    record.committed_version = hello.committed_version();
    record.last_epoch_number = hello.last_epoch_number();
    record.committed_epoch_id = hello.committed_epoch_id();
    record.in_doubt = hello.in_doubt();
    session = {it->second, record.generation};
  }
  if (fenced != nullptr) fenced->Cut();
  return session;
}

bool Cluster::IsCurrentLocked(const DaemonSession& session) const {
  auto it = daemons_.find(session.index);
  return it != daemons_.end() && it->second.connected &&
         it->second.generation == session.generation;
}

bool Cluster::IsCurrent(const DaemonSession& session) const {
  absl::MutexLock lock(&mu_);
  return IsCurrentLocked(session);
}

std::vector<Cluster::Registration> Cluster::DropRanksLocked(int32_t daemon) {
  std::vector<Registration> dropped;
  for (auto rank = ranks_.begin(); rank != ranks_.end();) {
    if (rank->second.daemon != daemon) {
      ++rank;
      continue;
    }
    dropped.push_back(std::move(rank->second.registration));
    rank = ranks_.erase(rank);
  }
  return dropped;
}

void Cluster::RemoveDaemon(const DaemonSession& session) {
  std::vector<Registration> dropped;  // freed after the lock is released
  absl::MutexLock lock(&mu_);
  if (!IsCurrentLocked(session)) return;
  DaemonRecord& record = daemons_[session.index];
  record.connected = false;
  record.disconnected_at = MonotonicNow();
  record.channel.reset();
  dropped = DropRanksLocked(session.index);
}

std::vector<std::string> Cluster::ForgetGone(absl::Duration now, absl::Duration after) {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> forgotten;
  for (auto it = daemons_.begin(); it != daemons_.end();) {
    const DaemonRecord& record = it->second;
    if (record.connected || now - record.disconnected_at <= after ||
        !record.in_doubt.epoch_id().empty()) {
      ++it;
      continue;
    }
    forgotten.push_back(record.peer.node());
    index_of_node_.erase(record.peer.node());
    it = daemons_.erase(it);
  }
  return forgotten;
}

absl::Status Cluster::AddRank(const DaemonSession& session, v1::RankRegistration registration) {
  const transport::RankKey key = {registration.role(), registration.layout().rank()};
  const uint64_t sent_id = registration.registration_id();
  Registration kept = std::make_shared<const v1::RankRegistration>(std::move(registration));
  absl::MutexLock lock(&mu_);  // declared after `kept`: a replaced registration is freed unlocked
  if (!IsCurrentLocked(session)) {
    return absl::FailedPreconditionError(
        absl::StrCat(key.Name(), ": the registering daemon was fenced"));
  }
  auto it = ranks_.find(key);
  if (it != ranks_.end() && it->second.daemon != session.index) {
    return absl::AlreadyExistsError(absl::StrCat(key.Name(), " is already registered by daemon ",
                                                 daemons_[it->second.daemon].peer.node()));
  }
  // The daemon's id survives a renewed control session; without one, each is new.
  const uint64_t id = sent_id != 0 ? sent_id : ++registrations_;
  if (it == ranks_.end()) {
    ranks_[key] = RankRecord{session.index, std::move(kept), -1, id};
  } else {  // the replaced registration swaps into `kept`
    std::swap(it->second.registration, kept);
    if (it->second.registration_id != id) it->second.published = -1;
    it->second.registration_id = id;
  }
  return absl::OkStatus();
}

absl::Status Cluster::RemoveRank(const DaemonSession& session, v1::Role role, int64_t rank) {
  Registration removed;  // freed after the lock is released
  absl::MutexLock lock(&mu_);
  if (!IsCurrentLocked(session)) {
    return absl::FailedPreconditionError(
        absl::StrCat(RankName(role, rank), ": the deregistering daemon was fenced"));
  }
  auto it = ranks_.find({role, rank});
  if (it != ranks_.end() && it->second.daemon == session.index) {
    removed = std::move(it->second.registration);
    ranks_.erase(it);
  }
  return absl::OkStatus();
}

absl::Status Cluster::MarkPublished(const DaemonSession& session, int64_t source_rank,
                                    int64_t version) {
  absl::MutexLock lock(&mu_);
  if (!IsCurrentLocked(session)) {
    return absl::FailedPreconditionError(
        absl::StrCat(RankName(v1::ROLE_SOURCE, source_rank), ": the publishing daemon was fenced"));
  }
  auto it = ranks_.find({v1::ROLE_SOURCE, source_rank});
  if (it != ranks_.end() && it->second.daemon == session.index) {
    it->second.published = std::max(it->second.published, version);
  }
  return absl::OkStatus();
}

bool Cluster::Touch(const DaemonSession& session, bool handling) {
  absl::MutexLock lock(&mu_);
  if (!IsCurrentLocked(session)) return false;
  DaemonRecord& record = daemons_[session.index];
  record.last_heard = MonotonicNow();
  record.handling = handling;
  return true;
}

std::vector<std::string> Cluster::CutExpired(absl::Duration now, absl::Duration lease) {
  std::vector<std::shared_ptr<DaemonChannel>> expired;
  std::vector<std::string> nodes;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [index, record] : daemons_) {
      if (!record.connected) continue;
      const absl::Duration unread =
          record.channel != nullptr ? record.channel->WriteBlockedFor(now) : absl::ZeroDuration();
      const int64_t lease_ms = absl::ToInt64Milliseconds(lease);
      if (!record.handling && now - record.last_heard > lease) {
        nodes.push_back(absl::StrCat("refitd on ", record.peer.node(), " sent nothing for ",
                                     lease_ms, " ms (its lease): cut off"));
      } else if (unread > lease) {
        nodes.push_back(absl::StrCat("refitd on ", record.peer.node(),
                                     " left a message unread for ", lease_ms,
                                     " ms (its lease): cut off"));
      } else {
        continue;
      }
      expired.push_back(record.channel);
    }
  }
  // The streams' handlers see the cut and remove the daemons (and fail their epoch).
  for (const std::shared_ptr<DaemonChannel>& channel : expired) {
    if (channel != nullptr) channel->Cut();
  }
  return nodes;
}

uint32_t Cluster::LastEpochNumber() const {
  absl::MutexLock lock(&mu_);
  uint32_t number = 0;
  for (const auto& [index, record] : daemons_) {
    number = std::max(number, record.last_epoch_number);
  }
  return number;
}

std::vector<Cluster::InDoubtDaemon> Cluster::InDoubtDaemons() const {
  absl::MutexLock lock(&mu_);
  std::vector<InDoubtDaemon> in_doubt;
  for (const auto& [index, record] : daemons_) {
    if (!record.connected || record.in_doubt.epoch_id().empty()) continue;
    in_doubt.push_back({index, record.peer.node(), record.in_doubt, record.channel});
  }
  return in_doubt;
}

std::vector<NodeWord> Cluster::NodeWords() const {
  absl::MutexLock lock(&mu_);
  std::vector<NodeWord> words;
  for (const auto& [index, record] : daemons_) {
    words.push_back({record.peer.node(), record.committed_epoch_id});
  }
  return words;
}

void Cluster::SettleInDoubt(int32_t daemon, const std::string& epoch_id, bool committed) {
  absl::MutexLock lock(&mu_);
  auto it = daemons_.find(daemon);
  if (it == daemons_.end() || it->second.in_doubt.epoch_id() != epoch_id) return;
  DaemonRecord& record = it->second;
  if (committed) {
    record.committed_epoch_id = epoch_id;
    record.committed_version = std::max(record.committed_version, record.in_doubt.version());
  }
  record.in_doubt.Clear();
}

int64_t Cluster::CommittedVersion() const {
  absl::MutexLock lock(&mu_);
  int64_t version = -1;
  for (const auto& [index, record] : daemons_) {
    version = std::max(version, record.committed_version);
  }
  return version;
}

std::vector<int64_t> Cluster::AwaitPublished(int64_t version, absl::Time deadline) const {
  absl::MutexLock lock(&mu_);
  auto all_published = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const auto& [key, record] : ranks_) {
      if (key.role == v1::ROLE_SOURCE && record.published < version) return false;
    }
    return true;
  };
  mu_.AwaitWithDeadline(absl::Condition(&all_published), deadline);
  std::vector<int64_t> missing;
  for (const auto& [key, record] : ranks_) {
    if (key.role == v1::ROLE_SOURCE && record.published < version) missing.push_back(key.rank);
  }
  return missing;
}

std::pair<int64_t, int64_t> Cluster::PublishedRange() const {
  absl::MutexLock lock(&mu_);
  std::pair<int64_t, int64_t> range{-1, -1};
  bool first = true;
  for (const auto& [key, record] : ranks_) {
    if (key.role != v1::ROLE_SOURCE) continue;
    range.first = first ? record.published : std::min(range.first, record.published);
    range.second = std::max(range.second, record.published);
    first = false;
  }
  return range;
}

absl::StatusOr<ClusterSnapshot> Cluster::Snapshot(bool destination_replicas) const {
  // Under the lock only the registrations' pointers and the small per-rank facts are taken;
  // the layouts (tens of MB for a large model) are built from them after it is released.
  struct Entry {
    transport::RankKey key;
    RankRecord record;
  };
  std::vector<Entry> entries;
  ClusterSnapshot snapshot;
  {
    absl::MutexLock lock(&mu_);
    entries.reserve(ranks_.size());
    for (const auto& [key, record] : ranks_) entries.push_back({key, record});
    for (const auto& [index, record] : daemons_) {
      if (!record.connected) continue;
      snapshot.daemons.push_back(record.peer);
      snapshot.channels[index] = record.channel;
    }
  }
  std::set<int32_t> shared_memory_daemons;  // those that said a shared-memory domain
  for (const v1::DaemonPeer& peer : snapshot.daemons) {
    if (!peer.shared_memory_domain().empty()) shared_memory_daemons.insert(peer.index());
  }
  std::map<std::string, const v1::TensorSpec*> tensors[2];
  for (const auto& [key, record] : entries) {
    const bool source = key.role == v1::ROLE_SOURCE;
    v1::LayoutSpec& side = source ? snapshot.sources : snapshot.destinations;
    for (const v1::TensorSpec& t : record.registration->tensors()) {
      auto [it, inserted] = tensors[source].emplace(t.name(), &t);
      if (inserted) {
        *side.add_tensors() = t;
      } else if (!SameTensor(*it->second, t)) {
        if (!source && destination_replicas) {
          snapshot.destinations_disagree = true;
          continue;
        }
        return absl::InvalidArgumentError(
            absl::StrCat(t.name(), ": ", key.Name(),
                         " declares a dtype, shape or quantization other ranks of its side do "
                         "not"));
      }
    }
    v1::RankLayout* rank = side.add_ranks();
    *rank = record.registration->layout();
    if (!source && shared_memory_daemons.count(record.daemon) && WritableStraight(*rank)) {
      snapshot.shared_destinations[key.rank] = *rank;
    }
    // Buffers are the daemon's business; the plan needs only the views' geometry, and the
    // data plane whether the rank's memory is on a GPU.
    bool gpu = false;
    for (v1::BufferSpec& buffer : *rank->mutable_buffers()) {
      gpu = gpu || !buffer.cuda_ipc_handle().empty();
      buffer.clear_shm_name();
      buffer.clear_cuda_ipc_handle();
    }
    if (source) {
      const bool first = snapshot.sources.ranks_size() == 1;
      snapshot.published_oldest =
          first ? record.published : std::min(snapshot.published_oldest, record.published);
      snapshot.published_newest = std::max(snapshot.published_newest, record.published);
      snapshot.source_registrations[key.rank] = record.registration_id;
    } else {
      snapshot.destination_registrations[key.rank] = record.registration_id;
      snapshot.destination_declarations[key.rank] = record.registration;
    }
    v1::RankPlacement* placement = &snapshot.placement.emplace_back();
    placement->set_role(key.role);
    placement->set_rank(key.rank);
    placement->set_daemon(record.daemon);
    placement->set_gpu(gpu);
    placement->set_device(gpu ? rank->device() : -1);
  }
  return snapshot;
}

std::vector<Cluster::PeerDestinationList> Cluster::PeerDestinationsAround(int32_t daemon) const {
  std::vector<std::pair<int32_t, std::shared_ptr<DaemonChannel>>> members;  // of the domain
  std::vector<std::pair<int32_t, Registration>> ranks;  // the domain's, by daemon
  {
    absl::MutexLock lock(&mu_);
    auto found = daemons_.find(daemon);
    if (found == daemons_.end() || found->second.peer.shared_memory_domain().empty()) return {};
    const std::string& domain = found->second.peer.shared_memory_domain();
    std::set<int32_t> in_domain;
    for (const auto& [index, record] : daemons_) {
      if (!record.connected || record.peer.shared_memory_domain() != domain) continue;
      in_domain.insert(index);
      members.emplace_back(index, record.channel);
    }
    for (const auto& [key, record] : ranks_) {
      if (key.role == v1::ROLE_DESTINATION && in_domain.count(record.daemon)) {
        ranks.emplace_back(record.daemon, record.registration);
      }
    }
  }
  // The layouts are copied after the lock is released (they can be large).
  std::vector<PeerDestinationList> lists;
  for (const auto& [index, channel] : members) {
    PeerDestinationList& list = lists.emplace_back();
    list.channel = channel;
    std::set<std::string> tensors;
    for (const auto& [owner, registration] : ranks) {
      if (owner == index || !WritableStraight(registration->layout())) continue;
      *list.ranks.add_ranks() = registration->layout();
      for (const v1::TensorSpec& t : registration->tensors()) {
        if (tensors.insert(t.name()).second) *list.ranks.add_tensors() = t;
      }
    }
  }
  return lists;
}

std::map<int32_t, std::shared_ptr<DaemonChannel>> Cluster::Channels() const {
  absl::MutexLock lock(&mu_);
  std::map<int32_t, std::shared_ptr<DaemonChannel>> channels;
  for (const auto& [index, record] : daemons_) {
    if (record.connected) channels[index] = record.channel;
  }
  return channels;
}

std::vector<std::string> Cluster::DaemonNames() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> names;
  for (const auto& [index, record] : daemons_) {
    names.push_back(absl::StrCat(record.peer.node(), record.connected ? "" : " (disconnected)"));
  }
  return names;
}

std::vector<std::string> Cluster::DaemonGpus() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> gpus;
  for (const auto& [index, record] : daemons_) gpus.push_back(record.gpu);
  return gpus;
}

std::string Cluster::NodeOf(int32_t daemon) const {
  absl::MutexLock lock(&mu_);
  auto it = daemons_.find(daemon);
  return it == daemons_.end() ? absl::StrCat("daemon ", daemon) : it->second.peer.node();
}

std::string Cluster::IncarnationOf(const std::string& node) const {
  absl::MutexLock lock(&mu_);
  auto index = index_of_node_.find(node);
  if (index == index_of_node_.end()) return "";
  const DaemonRecord& record = daemons_.at(index->second);
  return record.connected ? record.incarnation : "";
}

std::map<int64_t, Cluster::DestinationRank> Cluster::DestinationRanks() const {
  absl::MutexLock lock(&mu_);
  std::map<int64_t, DestinationRank> ranks;
  for (const auto& [key, record] : ranks_) {
    if (key.role != v1::ROLE_DESTINATION) continue;
    auto daemon = daemons_.find(record.daemon);
    ranks[key.rank] = {daemon == daemons_.end() ? "" : daemon->second.peer.node(),
                       record.registration_id, record.registration->held_version()};
  }
  return ranks;
}

void Cluster::AwaitHeardSince(const std::set<int32_t>& daemons, absl::Duration since,
                              absl::Time deadline) const {
  absl::MutexLock lock(&mu_);
  auto settled = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (int32_t index : daemons) {
      auto it = daemons_.find(index);
      if (it != daemons_.end() && it->second.connected && it->second.last_heard <= since) {
        return false;
      }
    }
    return true;
  };
  mu_.AwaitWithDeadline(absl::Condition(&settled), deadline);
}

int64_t Cluster::RankCount(v1::Role role) const {
  absl::MutexLock lock(&mu_);
  int64_t count = 0;
  for (const auto& [key, record] : ranks_) count += key.role == role;
  return count;
}

}  // namespace refit::daemon

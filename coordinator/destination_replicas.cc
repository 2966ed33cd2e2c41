#include "coordinator/destination_replicas.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace refit::daemon {
namespace {

// "3, 5, 7" (at most 16 named).
std::string Listed(const std::vector<int64_t>& values) {
  const size_t named = std::min<size_t>(values.size(), 16);
  return absl::StrCat(absl::StrJoin(values.begin(), values.begin() + named, ", "),
                      named < values.size() ? ", ..." : "");
}

// Erases the entries of `map` whose key is not in `kept`.
template <typename Key, typename Map>
void EraseUnless(const std::set<Key>& kept, Map* map) {
  for (auto it = map->begin(); it != map->end();) {
    it = kept.count(it->first) ? std::next(it) : map->erase(it);
  }
}

}  // namespace

DestinationReplicas::DestinationReplicas(const v1::ReplicaPolicy& policy, int64_t expected_ranks)
    : ranks_per_replica_(std::max<int64_t>(policy.ranks_per_replica(), 1)),
      min_replicas_(std::max<int64_t>(policy.min_replicas(), 1)),
      expected_replicas_(expected_ranks / ranks_per_replica_) {}

std::string DestinationReplicas::Describe(int64_t replica) const {
  const int64_t first = replica * ranks_per_replica_;
  return ranks_per_replica_ == 1
             ? absl::StrCat("replica ", replica, " (destination rank ", first, ")")
             : absl::StrCat("replica ", replica, " (destination ranks ", first, "-",
                            first + ranks_per_replica_ - 1, ")");
}

ReplicaCensus DestinationReplicas::Census(const std::set<int64_t>& registered_ranks) const {
  std::map<int64_t, std::set<int64_t>> registered;  // replica -> its ranks registered
  for (int64_t rank : registered_ranks) registered[ReplicaOf(rank)].insert(rank);
  ReplicaCensus census;
  for (const auto& [replica, ranks] : registered) {
    if (static_cast<int64_t>(ranks.size()) == ranks_per_replica_) {
      census.complete.push_back(replica);
      continue;
    }
    std::vector<int64_t>& missing = census.incomplete[replica];
    for (int64_t rank : RanksOf({replica})) {
      if (!ranks.count(rank)) missing.push_back(rank);
    }
  }
  for (int64_t replica = 0; replica < expected_replicas_; ++replica) {
    if (!registered.count(replica)) census.absent.push_back(replica);
  }
  return census;
}

absl::Status DestinationReplicas::CheckEnough(const ReplicaCensus& census) const {
  const int64_t complete = census.complete.size();
  if (complete >= min_replicas_) return absl::OkStatus();
  std::string what = absl::StrCat("the refit group has ", complete, " complete destination ",
                                  complete == 1 ? "replica" : "replicas", " of the ", min_replicas_,
                                  " it needs (", ranks_per_replica_, " ranks each)");
  if (!census.complete.empty()) absl::StrAppend(&what, "; complete: ", Listed(census.complete));
  for (const auto& [replica, missing] : census.incomplete) {
    absl::StrAppend(&what, "; ", Describe(replica), " misses ranks ", Listed(missing));
  }
  for (const auto& [replica, why] : census.held) {
    absl::StrAppend(&what, "; ", Describe(replica), " is held out of refits (", why, ")");
  }
  if (!census.absent.empty()) absl::StrAppend(&what, "; absent: ", Listed(census.absent));
  return absl::FailedPreconditionError(what);
}

std::vector<int64_t> DestinationReplicas::Lacking(
    const std::vector<int64_t>& replicas, const std::map<int64_t, uint64_t>& holders,
    const std::map<int64_t, uint64_t>& registrations) const {
  std::vector<int64_t> lacking;
  for (int64_t replica : replicas) {
    for (int64_t rank : RanksOf({replica})) {
      auto held = holders.find(rank);
      auto now = registrations.find(rank);
      if (held == holders.end() || now == registrations.end() || held->second != now->second) {
        lacking.push_back(replica);
        break;
      }
    }
  }
  return lacking;
}

std::set<int64_t> DestinationReplicas::RanksOf(const std::vector<int64_t>& replicas) const {
  std::set<int64_t> ranks;
  for (int64_t replica : replicas) {
    for (int64_t i = 0; i < ranks_per_replica_; ++i) ranks.insert(replica * ranks_per_replica_ + i);
  }
  return ranks;
}

bool EnoughReplicas(const v1::JobSpec& job, const Cluster& cluster) {
  const DestinationReplicas replicas(job.destination_replicas(), job.destination_ranks());
  std::set<int64_t> registered;
  for (const auto& [rank, holder] : cluster.DestinationRanks()) registered.insert(rank);
  return replicas.CheckEnough(replicas.Census(registered)).ok();
}

std::string DescribeReplicas(const std::vector<int64_t>& replicas) {
  return absl::StrCat(replicas.size() == 1 ? "replica " : "replicas ", Listed(replicas));
}

void NarrowDestinations(const std::set<int64_t>& ranks, ClusterSnapshot* snapshot) {
  auto* kept = snapshot->destinations.mutable_ranks();
  const int before = kept->size();
  kept->erase(std::remove_if(kept->begin(), kept->end(),
                             [&](const v1::RankLayout& r) { return !ranks.count(r.rank()); }),
              kept->end());
  EraseUnless(ranks, &snapshot->destination_declarations);
  // The tensors are those the ranks kept declare (a replica left out may have declared
  // others, or the same ones otherwise).
  const bool declared =
      snapshot->destination_declarations.size() == static_cast<size_t>(kept->size());
  if (declared && (kept->size() != before || snapshot->destinations_disagree)) {
    snapshot->destinations.clear_tensors();
    snapshot->destinations_disagree = false;
    std::map<std::string, const v1::TensorSpec*> named;
    for (const auto& [rank, declared] : snapshot->destination_declarations) {
      for (const v1::TensorSpec& t : declared->tensors()) {
        auto [it, inserted] = named.emplace(t.name(), &t);
        if (inserted) {
          *snapshot->destinations.add_tensors() = t;
        } else if (!SameTensor(*it->second, t)) {
          snapshot->destinations_disagree = true;
        }
      }
    }
  }
  std::vector<v1::RankPlacement> placement;
  std::set<int32_t> daemons;  // those holding a rank of the epoch
  for (v1::RankPlacement& p : snapshot->placement) {
    if (p.role() == v1::ROLE_DESTINATION && !ranks.count(p.rank())) continue;
    daemons.insert(p.daemon());
    placement.push_back(std::move(p));
  }
  snapshot->placement = std::move(placement);
  EraseUnless(ranks, &snapshot->destination_registrations);
  EraseUnless(ranks, &snapshot->shared_destinations);
  EraseUnless(daemons, &snapshot->channels);
}

}  // namespace refit::daemon

// Destination replicas as members of a refit group (v1::ReplicaPolicy): inference replicas
// (data-parallel copies of the engine) that join and leave. Replica r is destination ranks
// [r * n, (r + 1) * n). A census says which replicas have every rank registered, which miss
// some, and which expected ones have none; an epoch's snapshot is narrowed to the replicas
// it moves the version to.
#ifndef REFIT_COORDINATOR_DESTINATION_REPLICAS_H_
#define REFIT_COORDINATOR_DESTINATION_REPLICAS_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "coordinator/cluster.h"
#include "proto/refit.pb.h"

namespace refit::daemon {

struct ReplicaCensus {
  std::vector<int64_t> complete;                       // every rank registered
  std::map<int64_t, std::vector<int64_t>> incomplete;  // replica -> the ranks it misses
  std::vector<int64_t> absent;                         // expected, no rank registered
  // Complete, but held out of refits (coordinator/replica_vetting.h): replica -> why. Not in
  // `complete`.
  std::map<int64_t, std::string> held;
};

class DestinationReplicas {
 public:
  // `expected_ranks`: the job's destination rank count (the replicas expected are that
  // many ranks' worth).
  DestinationReplicas(const v1::ReplicaPolicy& policy, int64_t expected_ranks);

  int64_t ranks_per_replica() const { return ranks_per_replica_; }
  int64_t ReplicaOf(int64_t rank) const { return rank / ranks_per_replica_; }
  // "replica 1 (destination ranks 2-3)".
  std::string Describe(int64_t replica) const;

  int64_t min_replicas() const { return min_replicas_; }
  // Of the destination ranks registered.
  ReplicaCensus Census(const std::set<int64_t>& registered_ranks) const;
  // FAILED_PRECONDITION saying what is missing (or held) when fewer replicas are complete
  // (and not held) than the policy's minimum.
  absl::Status CheckEnough(const ReplicaCensus& census) const;
  // The destination ranks of `replicas`.
  std::set<int64_t> RanksOf(const std::vector<int64_t>& replicas) const;
  // Those of `replicas` with a rank whose registration now (`registrations`: rank ->
  // registration) is not the one a version was committed to (`holders`, the same form).
  std::vector<int64_t> Lacking(const std::vector<int64_t>& replicas,
                               const std::map<int64_t, uint64_t>& holders,
                               const std::map<int64_t, uint64_t>& registrations) const;

 private:
  int64_t ranks_per_replica_;
  int64_t min_replicas_;
  int64_t expected_replicas_;
};

// Whether the job's destination replicas (job.destination_replicas set) are complete in at
// least the minimum number (the coordinator's readiness).
bool EnoughReplicas(const v1::JobSpec& job, const Cluster& cluster);

// "replicas 1, 3" (at most 16 named), "replica 2".
std::string DescribeReplicas(const std::vector<int64_t>& replicas);

// Keeps in `snapshot` only the destination ranks in `ranks`, and only the daemons that hold
// a rank still in it (the others take no part in the epoch).
void NarrowDestinations(const std::set<int64_t>& ranks, ClusterSnapshot* snapshot);

}  // namespace refit::daemon

#endif  // REFIT_COORDINATOR_DESTINATION_REPLICAS_H_

#include "coordinator/job_validation.h"

#include <cmath>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "daemon/request_limits.h"

namespace refit::daemon {
namespace {

absl::Status Bad(const std::string& field, const std::string& rule) {
  return absl::InvalidArgumentError(absl::StrCat("job: ", field, " ", rule));
}

// 0 means the default; otherwise within [low, high].
absl::Status CheckOptionalRange(const std::string& field, int64_t value, int64_t low, int64_t high,
                                const std::string& unit) {
  if (value == 0 || (value >= low && value <= high)) return absl::OkStatus();
  return Bad(field, absl::StrCat(value, " is outside ", low, " to ", high, " ", unit,
                                 " (0 or absent: the default)"));
}

absl::Status CheckRate(const std::string& field, double value) {
  if (std::isfinite(value) && value >= 0) return absl::OkStatus();
  return Bad(field, absl::StrCat(value, " is not a rate: it is at least 0 (0: the default)"));
}

absl::Status CheckReplicas(const v1::JobSpec& job) {
  const v1::ReplicaPolicy& replicas = job.destination_replicas();
  const int64_t per_replica = replicas.ranks_per_replica();
  if (per_replica < 1 || per_replica > job.destination_ranks()) {
    return Bad("destinationReplicas.ranksPerReplica",
               absl::StrCat(per_replica, " is not 1 to destinationRanks (", job.destination_ranks(),
                            "); 0 or absent takes the tp of destinationParallel"));
  }
  if (job.destination_ranks() % per_replica != 0) {
    return Bad("destinationReplicas.ranksPerReplica",
               absl::StrCat(per_replica, " does not divide destinationRanks (",
                            job.destination_ranks(), "), the replicas expected"));
  }
  const int64_t expected = job.destination_ranks() / per_replica;
  if (replicas.min_replicas() < 0 || replicas.min_replicas() > expected) {
    return Bad("destinationReplicas.minReplicas",
               absl::StrCat(replicas.min_replicas(), " is outside 0 to ", expected,
                            " (the replicas expected; 0 or absent: 1)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckJob(const v1::JobSpec& job) {
  if (job.name().size() > 63) {
    return Bad("name", absl::StrCat("of ", job.name().size(), " characters: at most 63"));
  }
  for (char c : job.name()) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') {
      return Bad("name", absl::StrCat("\"", absl::CHexEscape(job.name()),
                                      "\" holds a character other than letters, digits and . _ -"));
    }
  }
  const int64_t max_ranks = RegistrationLimits().max_rank + 1;
  for (const auto& [field, count] :
       {std::pair<const char*, int64_t>{"sourceRanks", job.source_ranks()},
        {"destinationRanks", job.destination_ranks()}}) {
    if (count < 1 || count > max_ranks) {
      return Bad(field, absl::StrCat(count, " is not a rank count: 1 to ", max_ranks,
                                     " (or name a model and its parallel settings)"));
    }
  }
  absl::Status status = CheckOptionalRange("epochDeadlineMs", job.epoch_deadline_ms(), 100,
                                           int64_t{24} * 3600 * 1000, "ms");
  if (status.ok()) {
    // A lease shorter than a few heartbeat intervals cuts healthy daemons.
    status = CheckOptionalRange("leaseMs", job.lease_ms(), 200, 600000, "ms");
  }
  if (status.ok()) {
    status = CheckOptionalRange("dataPlaneStallMs", job.data_plane_stall_ms(), 100,
                                int64_t{24} * 3600 * 1000, "ms");
  }
  if (status.ok()) {
    status = CheckOptionalRange("sourceReplicaCheckEpochs", job.source_replica_check_epochs(), 1,
                                1000, "epochs");
  }
  if (status.ok() && job.staging_budget_bytes() < 0) {
    status = Bad("stagingBudgetBytes", absl::StrCat(job.staging_budget_bytes(), " is negative"));
  }
  if (status.ok() && !job.strategy().empty() && job.strategy() != "reshard" &&
      job.strategy() != "gather_broadcast" && job.strategy() != "auto") {
    status = Bad("strategy", absl::StrCat("\"", absl::CHexEscape(job.strategy()),
                                          "\" is not reshard, gather_broadcast or auto"));
  }
  if (status.ok()) {
    status = CheckOptionalRange("pauseDeadlineMs", job.pause_deadline_ms(), 10,
                                int64_t{24} * 3600 * 1000, "ms");
  }
  if (status.ok()) {
    status = CheckOptionalRange("forgetDaemonsAfterMs", job.forget_daemons_after_ms(), 1000,
                                int64_t{7} * 24 * 3600 * 1000, "ms");
  }
  if (status.ok() && job.has_destination_replicas()) status = CheckReplicas(job);
  const v1::Topology& topology = job.topology();
  for (const auto& [field, rate] :
       {std::pair<const char*, double>{"topology.nvlinkGbytesPerS", topology.nvlink_gbytes_per_s()},
        {"topology.nicGbytesPerS", topology.nic_gbytes_per_s()},
        {"topology.localCopyGbytesPerS", topology.local_copy_gbytes_per_s()},
        {"topology.messageLatencyUs", topology.message_latency_us()},
        {"topology.batchLatencyUs", topology.batch_latency_us()}}) {
    if (status.ok()) status = CheckRate(field, rate);
  }
  return status;
}

absl::Status CheckJobRankCounts(const v1::JobSpec& job, int64_t model_source_ranks,
                                int64_t model_destination_ranks) {
  for (const auto& [field, given, derived] :
       {std::tuple<const char*, int64_t, int64_t>{"sourceRanks", job.source_ranks(),
                                                  model_source_ranks},
        {"destinationRanks", job.destination_ranks(), model_destination_ranks}}) {
    if (given != 0 && given != derived) {
      return Bad(field, absl::StrCat(given, " conflicts with model ", job.model(), " at ",
                                     job.source_parallel(), " -> ", job.destination_parallel(),
                                     ", which has ", derived));
    }
  }
  return absl::OkStatus();
}

}  // namespace refit::daemon

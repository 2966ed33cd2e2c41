// What the coordinator accepts as a job (refit.v1.JobSpec): every field within the range
// that lets a group form and an epoch run, checked at start so that a typo stops the
// coordinator with the field named instead of leaving a group that never forms.
#ifndef REFIT_COORDINATOR_JOB_VALIDATION_H_
#define REFIT_COORDINATOR_JOB_VALIDATION_H_

#include <cstdint>

#include "absl/status/status.h"
#include "proto/refit.pb.h"

namespace refit::daemon {

// INVALID_ARGUMENT naming the first field out of range (JSON field names, as the job file
// spells them) and the rule.
absl::Status CheckJob(const v1::JobSpec& job);

// A job naming a model and also rank counts: the counts must be the model's.
absl::Status CheckJobRankCounts(const v1::JobSpec& job, int64_t model_source_ranks,
                                int64_t model_destination_ranks);

}  // namespace refit::daemon

#endif  // REFIT_COORDINATOR_JOB_VALIDATION_H_

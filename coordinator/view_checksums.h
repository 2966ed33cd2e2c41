// End-to-end integrity of an epoch. After executing, every daemon hashes each view of its
// ranks (XXH3-64 of the view's elements in row-major order, so the memory layout does not
// matter). The coordinator then compares views that hold the same box of a tensor: data-
// parallel replicas on either side, and a source view against a destination view of the
// same box. Any disagreement names the views and fails the epoch. The daemons' half
// (hashing) is transport/view_hashing.h; this is the coordinator's: which views to compare,
// and comparing them.
//
// Threading: pure functions of their arguments.
#ifndef REFIT_COORDINATOR_VIEW_CHECKSUMS_H_
#define REFIT_COORDINATOR_VIEW_CHECKSUMS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/refit.pb.h"
#include "transport/rank_key.h"

namespace refit::daemon {

using transport::ViewKeySet;

// The views whose checksums CompareViewChecksums can compare with another: those whose box
// another view holds too, destination views counted only when `destinations_hashed`
// (elsewhere the piece checksums cover them and they are not hashed). A view no other one
// shares need not be hashed at all.
ViewKeySet ComparedViews(const v1::LayoutSpec& sources, const v1::LayoutSpec& destinations,
                         bool destinations_hashed);

// The default of JobSpec.source_replica_check_epochs.
inline constexpr uint32_t kDefaultSourceReplicaCheckEpochs = 4;

// Compares the checksums of views with the same (tensor, offset, extent). Returns how
// many views were compared with at least one other copy, or DATA_LOSS naming the views
// that disagree with the source side (or with the majority when no source holds the box).
absl::StatusOr<int64_t> CompareViewChecksums(const v1::LayoutSpec& sources,
                                             const v1::LayoutSpec& destinations,
                                             const std::vector<v1::ViewChecksum>& checksums);

}  // namespace refit::daemon

#endif  // REFIT_COORDINATOR_VIEW_CHECKSUMS_H_

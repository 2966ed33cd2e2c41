// End-to-end integrity of an epoch. After executing, every daemon hashes each view of its
// ranks (XXH3-64 of the view's elements in row-major order, so the memory layout does not
// matter). The coordinator then compares views that hold the same box of a tensor: data-
// parallel replicas on either side, and a source view against a destination view of the
// same box. Any disagreement names the views and fails the epoch.
#ifndef REFIT_DAEMON_VIEW_CHECKSUMS_H_
#define REFIT_DAEMON_VIEW_CHECKSUMS_H_

#include <atomic>
#include <cstdint>
#include <set>
#include <tuple>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/refit.pb.h"
#include "transport/buffer_map.h"

namespace refit::daemon {

// A view of a rank: (role, rank, view index).
using ViewKeySet = std::set<std::tuple<int, int64_t, int32_t>>;

// Checksums of every host-memory view of `registrations`, read through `buffers` (views in
// GPU memory are left out until a device-side hash exists); given `only`, of those in it.
// CANCELLED once `*stop` is set (checked between views).
absl::StatusOr<std::vector<v1::ViewChecksum>> ChecksumViews(
    const std::vector<v1::RankRegistration>& registrations, const transport::BufferMap& buffers,
    const ViewKeySet* only = nullptr, const std::atomic<bool>* stop = nullptr);

// The bytes ChecksumViews would hash at most (views in GPU memory counted too).
int64_t ViewChecksumBytes(const std::vector<v1::RankRegistration>& registrations,
                          const transport::BufferMap& buffers, const ViewKeySet* only = nullptr);

// The views whose checksums CompareViewChecksums can compare with another: those whose box
// another view holds too, destination views counted only when `destinations_hashed`
// (elsewhere the piece checksums cover them and they are not hashed). A view no other one
// shares need not be hashed at all.
ViewKeySet ComparedViews(const v1::LayoutSpec& sources, const v1::LayoutSpec& destinations,
                         bool destinations_hashed);

// The default of JobSpec.source_replica_check_epochs.
inline constexpr uint32_t kDefaultSourceReplicaCheckEpochs = 4;

// Of the source views of `sources` (those in `only`, when given), the ones epoch
// `epoch_number` hashes when source replicas are compared a share at a time, `every`
// epochs for all: the views of the tensors whose name hashes (XXH3) to `epoch_number`
// modulo `every`. Every daemon picks the same tensors, so the replicas of a tensor are
// hashed in the same epoch wherever they are; `every` <= 1: all of them.
ViewKeySet SourceReplicaShare(const std::vector<v1::RankRegistration>& sources,
                              const ViewKeySet* only, uint32_t epoch_number, uint32_t every);

// Compares the checksums of views with the same (tensor, offset, extent). Returns how
// many views were compared with at least one other copy, or DATA_LOSS naming the views
// that disagree with the source side (or with the majority when no source holds the box).
absl::StatusOr<int64_t> CompareViewChecksums(const v1::LayoutSpec& sources,
                                             const v1::LayoutSpec& destinations,
                                             const std::vector<v1::ViewChecksum>& checksums);

}  // namespace refit::daemon

#endif  // REFIT_DAEMON_VIEW_CHECKSUMS_H_

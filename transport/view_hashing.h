// A daemon's half of the view checksums (the coordinator's half, and what they check, in
// coordinator/view_checksums.h): XXH3-64 of each view of its ranks, the view's elements in
// row-major order, so the memory layout does not matter.
//
// Threading: pure functions of their arguments; `buffers` is read, not locked; `stop` may
// be set from another thread.
#ifndef REFIT_TRANSPORT_VIEW_HASHING_H_
#define REFIT_TRANSPORT_VIEW_HASHING_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/refit.pb.h"
#include "transport/buffer_map.h"
#include "transport/interrupt.h"
#include "transport/rank_key.h"

namespace refit::transport {

// Checksums of every host-memory view of `registrations`, read through `buffers` (views in
// GPU memory are left out until a device-side hash exists); given `only`, of those in it.
// CANCELLED once `stop` is raised (checked between views).
absl::StatusOr<std::vector<v1::ViewChecksum>> ChecksumViews(
    const std::vector<v1::RankRegistration>& registrations, const BufferMap& buffers,
    const ViewKeySet* only = nullptr, const Interrupt* stop = nullptr);

// The bytes ChecksumViews would hash at most (views in GPU memory counted too).
int64_t ViewChecksumBytes(const std::vector<v1::RankRegistration>& registrations,
                          const BufferMap& buffers, const ViewKeySet* only = nullptr);

// Of the source views of `sources` (those in `only`, when given), the ones epoch
// `epoch_number` hashes when source replicas are compared a share at a time, `every`
// epochs for all: the views of the tensors whose name hashes (XXH3) to `epoch_number`
// modulo `every`. Every daemon picks the same tensors, so the replicas of a tensor are
// hashed in the same epoch wherever they are; `every` <= 1: all of them.
ViewKeySet SourceReplicaShare(const std::vector<v1::RankRegistration>& sources,
                              const ViewKeySet* only, uint32_t epoch_number, uint32_t every);

}  // namespace refit::transport

#endif  // REFIT_TRANSPORT_VIEW_HASHING_H_

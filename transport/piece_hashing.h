// This daemon's half of the integrity check of every piece an epoch moved (the
// coordinator's half, and the protocol, in coordinator/piece_checksums.h): the hashes of its
// ends of the view-to-view transfers, XXH3-64 of the elements in row-major order.
//
// Threading: a pure function of its arguments; `buffers` is read, not locked.
#ifndef REFIT_TRANSPORT_PIECE_HASHING_H_
#define REFIT_TRANSPORT_PIECE_HASHING_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/refit.pb.h"
#include "transport/buffer_map.h"
#include "transport/execution_stats.h"
#include "transport/rank_placement.h"

namespace refit::transport {

// This daemon's (`self`) ends of the view-to-view transfers of `slice` in host memory.
// An end hashed on the way (`on_the_way`, the executor's ExecutionStats::piece_hashes)
// keeps that hash; the others are hashed now, through `buffers`. Ends hashed on the way at
// a same-host peer's destination rank (written straight) are reported here, and this
// daemon's ends that such a peer wrote (`written_by_peers`) are left to that peer. The destination
// end of a piece into a bucketed rank exists only as hashed on the way (left out when absent).
absl::StatusOr<std::vector<v1::PieceChecksum>> ChecksumPieces(
    const v1::Plan& slice, const RankPlacement& placement, int32_t self, const BufferMap& buffers,
    const PieceHashes* on_the_way = nullptr);

}  // namespace refit::transport

#endif  // REFIT_TRANSPORT_PIECE_HASHING_H_

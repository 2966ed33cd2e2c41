// Integrity of every piece an epoch moved. For each transfer from a source view to a
// destination view, the daemon of the source view hashes the transfer's box there and the
// daemon of the destination view hashes the same box where it landed (XXH3-64 of the
// elements in row-major order, so memory layouts do not matter). The coordinator pairs the
// two by the transfer's sequence in the plan. Unlike view checksums, which compare views
// holding the same box, this covers reshards, where the two sides' boxes differ.
// Hashes are taken on the way (transport::PieceHashes): where a piece crosses a transport
// the sender hashes what it packs and the receiver what it unpacks; a copy inside one
// process hashes the bytes it copies once, for both ends. A replica forwarded from a
// destination view is checked against what was written there (the read must see the write).
// A piece that travels through a relay buffer is checked end to end: the source end of the
// transfer that filled the buffer against the destination end of each transfer that
// reads the whole buffer. Transfers through scratch buffers (gather_broadcast), and reads
// of part of a relay buffer, are left to the view checksums.
// The daemons' half (hashing) is transport/piece_hashing.h; this is the coordinator's:
// comparing.
//
// Threading: a pure function of its arguments.
#ifndef REFIT_COORDINATOR_PIECE_CHECKSUMS_H_
#define REFIT_COORDINATOR_PIECE_CHECKSUMS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/refit.pb.h"

namespace refit::daemon {

// Compares both ends of every transfer of `plan` that has them, and the source end of each
// transfer that reads a box of a destination view (a forwarded replica) with the
// destination end of the transfer that wrote that same box there. Returns how many pairs
// were compared, or DATA_LOSS naming the first piece whose ends differ.
absl::StatusOr<int64_t> ComparePieceChecksums(const v1::Plan& plan,
                                              const std::vector<v1::PieceChecksum>& pieces);

}  // namespace refit::daemon

#endif  // REFIT_COORDINATOR_PIECE_CHECKSUMS_H_

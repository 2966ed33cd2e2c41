#include "transport/piece_hashing.h"

#include <map>
#include <optional>
#include <string>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "transport/memory_fault_guard.h"
#include "transport/rank_key.h"
#include "transport/strided_copy.h"

namespace refit::transport {
namespace {

// Whether a transfer has an end to hash: view to view, or one hop of a piece through a
// relay buffer (filled from a source view, read into a destination view).
bool IsChecked(const v1::Transfer& t) {
  return (IsViewEndpoint(t.src()) && IsViewEndpoint(t.dst())) ||
         (IsViewEndpoint(t.src()) && IsRelayBufferEndpoint(t.dst())) ||
         (IsRelayBufferEndpoint(t.src()) && IsViewEndpoint(t.dst()));
}

// The hash of a transfer's end the executor took as it moved the piece, if it did.
std::optional<uint64_t> TakenOnTheWay(const PieceHashes* on_the_way, bool destination,
                                      int64_t sequence) {
  if (on_the_way == nullptr) return std::nullopt;
  const std::map<int64_t, uint64_t>& taken =
      destination ? on_the_way->at_destination : on_the_way->at_source;
  auto hash = taken.find(sequence);
  if (hash == taken.end()) return std::nullopt;
  return hash->second;
}

}  // namespace

absl::StatusOr<std::vector<v1::PieceChecksum>> ChecksumPieces(const v1::Plan& slice,
                                                              const RankPlacement& placement,
                                                              int32_t self,
                                                              const BufferMap& buffers,
                                                              const PieceHashes* on_the_way) {
  std::vector<v1::PieceChecksum> out;
  // A source box sent to several replicas is hashed once.
  std::map<std::tuple<int, int64_t, int32_t, std::string, Dims, Dims>, uint64_t> hashed;
  for (const v1::Batch& batch : slice.batches()) {
    for (const v1::Transfer& t : batch.transfers()) {
      if (!IsChecked(t)) continue;
      const Dims offset(t.offset().begin(), t.offset().end());
      const Dims extent(t.extent().begin(), t.extent().end());
      for (const bool destination : {false, true}) {
        const v1::Endpoint& end = destination ? t.dst() : t.src();
        if (!IsViewEndpoint(end)) continue;
        // An end hashed on the way is reported by the daemon that hashed it: its own, or a
        // same-host peer's destination it wrote straight into.
        if (std::optional<uint64_t> taken = TakenOnTheWay(on_the_way, destination, t.sequence())) {
          v1::PieceChecksum& checksum = out.emplace_back();
          checksum.set_sequence(t.sequence());
          checksum.set_destination(destination);
          checksum.set_xxh64(*taken);
          continue;
        }
        const v1::Role role = EndpointRole(end.kind());
        absl::StatusOr<int32_t> daemon = placement.DaemonOf(role, end.rank());
        if (!daemon.ok() || *daemon != self) continue;
        if (destination && on_the_way != nullptr &&
            on_the_way->written_by_peers.count(t.sequence())) {
          continue;  // the peer that wrote it hashed it
        }
        if (destination && buffers.IsBucketed(end.rank())) continue;  // handed over, gone
        auto [known, fresh] =
            hashed.try_emplace({role, end.rank(), end.view(), t.tensor(), offset, extent}, 0);
        if (fresh) {
          absl::StatusOr<ConstStridedRef> memory =
              buffers.Locate(role, end.rank(), end.view(), t.tensor(), offset, extent);
          if (!memory.ok()) return memory.status();
          if (memory->device >= 0) {  // GPU memory: no device-side hash yet
            hashed.erase(known);
            continue;
          }
          absl::Status hashed_ok = GuardMemoryAccess(
              absl::StrCat("hashing \"", t.tensor(), "\" in rank ", end.rank()), [&] {
                known->second =
                    HashBox(extent, buffers.tensors().at(t.tensor()).element_bytes, *memory);
              });
          if (!hashed_ok.ok()) return hashed_ok;
        }
        v1::PieceChecksum& checksum = out.emplace_back();
        checksum.set_sequence(t.sequence());
        checksum.set_destination(destination);
        checksum.set_xxh64(known->second);
      }
    }
  }
  return out;
}

}  // namespace refit::transport

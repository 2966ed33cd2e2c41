#include "daemon/piece_checksums.h"

#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "transport/memory_fault_guard.h"
#include "transport/strided_copy.h"

namespace refit::daemon {
namespace {

bool IsView(const v1::Endpoint& e) {
  return e.kind() == v1::ENDPOINT_SOURCE_VIEW || e.kind() == v1::ENDPOINT_DESTINATION_VIEW;
}

std::string Describe(const v1::Endpoint& e) {
  return absl::StrCat(e.kind() == v1::ENDPOINT_SOURCE_VIEW ? "source" : "destination", " rank ",
                      e.rank(), " view ", e.view());
}

}  // namespace

absl::StatusOr<std::vector<v1::PieceChecksum>> ChecksumPieces(
    const v1::Plan& slice, const transport::RankPlacement& placement, int32_t self,
    const transport::BufferMap& buffers) {
  std::vector<v1::PieceChecksum> out;
  // A source box sent to several replicas is hashed once.
  std::map<std::tuple<int, int64_t, int32_t, std::string, transport::Dims, transport::Dims>,
           uint64_t>
      hashed;
  for (const v1::Batch& batch : slice.batches()) {
    for (const v1::Transfer& t : batch.transfers()) {
      if (!IsView(t.src()) || !IsView(t.dst())) continue;
      const transport::Dims offset(t.offset().begin(), t.offset().end());
      const transport::Dims extent(t.extent().begin(), t.extent().end());
      for (const bool destination : {false, true}) {
        const v1::Endpoint& end = destination ? t.dst() : t.src();
        const v1::Role role = transport::EndpointRole(end.kind());
        absl::StatusOr<int32_t> daemon = placement.DaemonOf(role, end.rank());
        if (!daemon.ok() || *daemon != self) continue;
        auto [known, fresh] =
            hashed.try_emplace({role, end.rank(), end.view(), t.tensor(), offset, extent}, 0);
        if (fresh) {
          absl::StatusOr<transport::StridedRef> memory =
              buffers.Locate(role, end.rank(), end.view(), t.tensor(), offset, extent);
          if (!memory.ok()) return memory.status();
          if (memory->device >= 0) {  // GPU memory: no device-side hash yet
            hashed.erase(known);
            continue;
          }
          absl::Status hashed_ok = transport::GuardMemoryAccess(
              absl::StrCat("hashing \"", t.tensor(), "\" in rank ", end.rank()), [&] {
                known->second = transport::HashBox(
                    extent, buffers.tensors().at(t.tensor()).element_bytes, *memory);
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

absl::StatusOr<int64_t> ComparePieceChecksums(const v1::Plan& plan,
                                              const std::vector<v1::PieceChecksum>& pieces) {
  // sequence -> (source hash, destination hash), each present or not.
  std::map<int64_t, std::pair<std::optional<uint64_t>, std::optional<uint64_t>>> ends;
  for (const v1::PieceChecksum& p : pieces) {
    auto& [source, destination] = ends[p.sequence()];
    (p.destination() ? destination : source) = p.xxh64();
  }
  int64_t compared = 0;
  for (const v1::Batch& batch : plan.batches()) {
    for (const v1::Transfer& t : batch.transfers()) {
      auto it = ends.find(t.sequence());
      if (it == ends.end() || !it->second.first || !it->second.second) continue;
      ++compared;
      if (*it->second.first == *it->second.second) continue;
      return absl::DataLossError(absl::StrFormat(
          "checksum mismatch on %s [%s] + [%s]: %s holds %016x where %s sent %016x", t.tensor(),
          absl::StrJoin(t.offset(), ","), absl::StrJoin(t.extent(), ","), Describe(t.dst()),
          *it->second.second, Describe(t.src()), *it->second.first));
    }
  }
  return compared;
}

}  // namespace refit::daemon

#include "coordinator/piece_checksums.h"

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "transport/rank_key.h"

namespace refit::daemon {
namespace {

using transport::IsRelayBufferEndpoint;
using transport::IsViewEndpoint;

// Whether a read of a relay buffer moves the buffer's whole box (then its destination
// must hold what the transfer that filled the buffer read from its source).
bool ReadsWholeBuffer(const v1::Transfer& t) {
  return IsRelayBufferEndpoint(t.src()) &&
         std::equal(t.offset().begin(), t.offset().end(), t.src().buffer_offset().begin(),
                    t.src().buffer_offset().end()) &&
         std::equal(t.extent().begin(), t.extent().end(), t.src().buffer_extent().begin(),
                    t.src().buffer_extent().end());
}

std::string Describe(const v1::Endpoint& e) {
  if (IsRelayBufferEndpoint(e)) {
    return absl::StrCat("relay buffer ", e.relay_buffer(), " of source rank ", e.rank());
  }
  return absl::StrCat(e.kind() == v1::ENDPOINT_SOURCE_VIEW ? "source" : "destination", " rank ",
                      e.rank(), " view ", e.view());
}

// Transfer sequence -> (source hash, destination hash), each present or not.
using PieceEnds = std::map<int64_t, std::pair<std::optional<uint64_t>, std::optional<uint64_t>>>;

// A box of a tensor in one view: (rank, view, tensor, offset, extent).
using ViewBox =
    std::tuple<int64_t, int32_t, std::string, std::vector<int64_t>, std::vector<int64_t>>;

ViewBox BoxOf(const v1::Endpoint& view, const v1::Transfer& t) {
  return {view.rank(),
          view.view(),
          t.tensor(),
          {t.offset().begin(), t.offset().end()},
          {t.extent().begin(), t.extent().end()}};
}

// A transfer that reads a destination view (a replica forwarded from what an earlier batch
// wrote) must read what that earlier transfer wrote there, when it wrote exactly this box:
// this catches a read that came before the write had landed, or after something else wrote
// over it, which neither transfer's own two ends can see (each copy hashes what it moved).
absl::Status CompareWithItsWrite(const v1::Transfer& t, const PieceEnds& ends,
                                 const std::map<ViewBox, int64_t>& written_by, int64_t* compared) {
  auto writer = written_by.find(BoxOf(t.src(), t));
  if (writer == written_by.end()) return absl::OkStatus();
  auto written = ends.find(writer->second);
  auto read = ends.find(t.sequence());
  if (written == ends.end() || read == ends.end() || !written->second.second ||
      !read->second.first) {
    return absl::OkStatus();
  }
  ++*compared;
  if (*written->second.second == *read->second.first) return absl::OkStatus();
  return absl::DataLossError(absl::StrFormat(
      "checksum mismatch on %s [%s] + [%s]: %s was read as %016x to go on to %s, but %016x had "
      "been written there (transfer %d)",
      t.tensor(), absl::StrJoin(t.offset(), ","), absl::StrJoin(t.extent(), ","), Describe(t.src()),
      *read->second.first, Describe(t.dst()), *written->second.second, writer->second));
}

}  // namespace

absl::StatusOr<int64_t> ComparePieceChecksums(const v1::Plan& plan,
                                              const std::vector<v1::PieceChecksum>& pieces) {
  PieceEnds ends;
  for (const v1::PieceChecksum& p : pieces) {
    auto& [source, destination] = ends[p.sequence()];
    (p.destination() ? destination : source) = p.xxh64();
  }
  // Relay buffer (source rank, id) -> the sequence of the transfer that filled it.
  std::map<std::pair<int64_t, int64_t>, int64_t> filled_by;
  for (const v1::Batch& batch : plan.batches()) {
    for (const v1::Transfer& t : batch.transfers()) {
      if (IsRelayBufferEndpoint(t.dst()))
        filled_by[{t.dst().rank(), t.dst().relay_buffer()}] = t.sequence();
    }
  }
  // A destination view's box -> the sequence of the transfer that wrote it.
  std::map<ViewBox, int64_t> written_by;
  int64_t compared = 0;
  for (const v1::Batch& batch : plan.batches()) {
    for (const v1::Transfer& t : batch.transfers()) {
      if (t.src().kind() == v1::ENDPOINT_DESTINATION_VIEW) {
        absl::Status read_as_written = CompareWithItsWrite(t, ends, written_by, &compared);
        if (!read_as_written.ok()) return read_as_written;
      }
      if (t.dst().kind() == v1::ENDPOINT_DESTINATION_VIEW)
        written_by[BoxOf(t.dst(), t)] = t.sequence();
      // A read of a whole relay buffer pairs with the source end of the buffer's fill.
      int64_t source_sequence = t.sequence();
      if (IsRelayBufferEndpoint(t.src())) {
        auto fill = filled_by.find({t.src().rank(), t.src().relay_buffer()});
        if (!ReadsWholeBuffer(t) || fill == filled_by.end()) continue;
        source_sequence = fill->second;
      }
      auto source = ends.find(source_sequence);
      auto destination = ends.find(t.sequence());
      if (source == ends.end() || destination == ends.end() || !source->second.first ||
          !destination->second.second) {
        continue;
      }
      ++compared;
      if (*source->second.first == *destination->second.second) continue;
      return absl::DataLossError(absl::StrFormat(
          "checksum mismatch on %s [%s] + [%s]: %s holds %016x where %s sent %016x", t.tensor(),
          absl::StrJoin(t.offset(), ","), absl::StrJoin(t.extent(), ","), Describe(t.dst()),
          *destination->second.second, Describe(t.src()), *source->second.first));
    }
  }
  return compared;
}

}  // namespace refit::daemon

#include "planner/digest.h"

#include <cstdint>
#include <vector>

#include "absl/strings/str_format.h"
#include "xxhash.h"

namespace refit::planner {
namespace {

void Append(std::vector<uint8_t>* out, uint64_t value) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<uint8_t>(value >> (8 * i)));
}

}  // namespace

std::string PlanDigest(const Plan& plan) {
  XXH3_state_t* state = XXH3_createState();
  XXH3_128bits_reset(state);
  std::vector<uint8_t> chunk;
  chunk.reserve(1 << 16);
  XXH3_128bits_update(state, plan.strategy.data(), plan.strategy.size());
  auto flush = [&]() {
    XXH3_128bits_update(state, chunk.data(), chunk.size());
    chunk.clear();
  };
  for (const Transfer& t : plan.transfers) {
    const Piece& piece = plan.pieces[t.piece];
    Append(&chunk, (uint64_t{static_cast<uint8_t>(t.src.kind)} << 56) |
                       (uint64_t{static_cast<uint8_t>(t.dst.kind)} << 48) |
                       (uint64_t{static_cast<uint8_t>(t.route)} << 40));
    Append(&chunk, static_cast<uint32_t>(t.src.rank_index));
    Append(&chunk, static_cast<uint32_t>(t.src.index));
    Append(&chunk, static_cast<uint32_t>(t.dst.rank_index));
    Append(&chunk, static_cast<uint32_t>(t.dst.index));
    Append(&chunk, static_cast<uint32_t>(t.batch));
    Append(&chunk, static_cast<uint32_t>(piece.tensor));
    for (size_t d = 0; d < piece.box.rank(); ++d) {
      Append(&chunk, piece.box.offset[d]);
      Append(&chunk, piece.box.extent[d]);
    }
    if (chunk.size() > (1 << 16) - 512) flush();
  }
  flush();
  const XXH128_hash_t hash = XXH3_128bits_digest(state);
  XXH3_freeState(state);
  return absl::StrFormat("%016x%016x", hash.high64, hash.low64);
}

}  // namespace refit::planner

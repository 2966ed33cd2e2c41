#include "planner/digest.h"

#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/strings/str_format.h"
#include "xxhash.h"

namespace refit::planner {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "digests hash little-endian words and transfers as they are in memory");

// Fixed-width little-endian words; x86-64 and aarch64 hosts store them alike.
class WordStream {
 public:
  explicit WordStream(XXH3_state_t* state) : state_(state) { words_.reserve(kChunk); }
  ~WordStream() { Flush(); }
  void Add(int64_t word) {
    words_.push_back(word);
    if (words_.size() == kChunk) Flush();
  }
  void Flush() {
    XXH3_128bits_update(state_, words_.data(), words_.size() * sizeof(int64_t));
    words_.clear();
  }

 private:
  static constexpr size_t kChunk = 8192;
  XXH3_state_t* state_;
  std::vector<int64_t> words_;
};

// What a transfer's indices into `layout` become in the plan sent to the daemons.
void AddWireNames(const Layout& layout, XXH3_state_t* state) {
  WordStream words(state);
  words.Add(layout.tensors.size());
  for (const TensorInfo& tensor : layout.tensors) {
    words.Add(tensor.name.size());
    words.Flush();
    XXH3_128bits_update(state, tensor.name.data(), tensor.name.size());
  }
  words.Add(layout.ranks.size());
  for (const RankInfo& rank : layout.ranks) words.Add(rank.rank);
  // A view's id on the wire is its position in its rank's list, which zero-extent views
  // (left out of the compiled layout) shift.
  words.Add(layout.views.size());
  for (const ViewInfo& view : layout.views) words.Add(view.local_index);
}

}  // namespace

std::string PlanDigest(const Plan& plan, const Layout& sources, const Layout& destinations) {
  XXH3_state_t* state = XXH3_createState();
  XXH3_128bits_reset(state);
  XXH3_128bits_update(state, plan.strategy.data(), plan.strategy.size());
  {
    WordStream words(state);
    for (const Piece& piece : plan.pieces) {
      words.Add(piece.tensor);
      for (size_t d = 0; d < piece.box.rank(); ++d) {
        words.Add(piece.box.offset[d]);
        words.Add(piece.box.extent[d]);
      }
    }
  }
  // Transfers as they are in memory: no padding (plan.h), and the bit-fields are laid out
  // alike on little-endian x86-64 and aarch64.
  XXH3_128bits_update(state, plan.transfers.data(), plan.transfers.size() * sizeof(Transfer));
  AddWireNames(sources, state);
  AddWireNames(destinations, state);
  const XXH128_hash_t hash = XXH3_128bits_digest(state);
  XXH3_freeState(state);
  return absl::StrFormat("%016x%016x", hash.high64, hash.low64);
}

}  // namespace refit::planner

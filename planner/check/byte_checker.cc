#include "planner/check/byte_checker.h"

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "planner/check/region_math.h"

namespace refit::check {
namespace {

using planner::EndpointKind;
constexpr uint8_t kPoison = 0xA5;

uint64_t Mix(uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t NameHash(const std::string& name) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ULL;
  return h;
}

// The bytes element `linear` of a tensor must hold: a hash per block of 4096 elements,
// spread inside the block by an odd multiplier, so any two elements of a tensor differ
// (within the element's width) and a misplaced copy shows. Byte 0 never equals the
// poison, so an element that was never written cannot pass.
class Pattern {
 public:
  explicit Pattern(uint64_t tensor_hash) : tensor_hash_(tensor_hash) {}
  void Element(int64_t linear, int element_bytes, uint8_t* out) {
    const int64_t block = linear >> 12;
    if (block != block_) {
      block_ = block;
      block_bits_ = Mix(tensor_hash_ ^ Mix(static_cast<uint64_t>(block)));
    }
    uint64_t bits = block_bits_ ^ (static_cast<uint64_t>(linear & 4095) * 0x9E3779B97F4A7C15ULL);
    for (int b = 0; b < element_bytes; ++b) {
      if (b > 0 && b % 8 == 0) bits = Mix(bits);
      out[b] = static_cast<uint8_t>(bits >> (8 * (b % 8)));
    }
    if (out[0] == kPoison) out[0] ^= 1;
  }

 private:
  uint64_t tensor_hash_;
  int64_t block_ = -1;
  uint64_t block_bits_ = 0;
};

// memcpy / memcmp of one element, with the common widths inlined.
inline void CopyElement(uint8_t* dst, const uint8_t* src, int bytes) {
  switch (bytes) {
    case 1:
      *dst = *src;
      return;
    case 2:
      std::memcpy(dst, src, 2);
      return;
    case 4:
      std::memcpy(dst, src, 4);
      return;
    case 8:
      std::memcpy(dst, src, 8);
      return;
    default:
      std::memcpy(dst, src, bytes);
  }
}

inline bool SameElement(const uint8_t* a, const uint8_t* b, int bytes) {
  for (int i = 0; i < bytes; ++i) {
    if (a[i] != b[i]) return false;
  }
  return true;
}

// Visits every row (run along the last dim) of a box: fn(start coordinate, length).
template <typename Fn>
void ForEachRow(const planner::Box& box, Fn fn) {
  if (box.Empty()) return;
  const size_t rank = box.rank();
  const int64_t length = box.extent[rank - 1];
  std::vector<int64_t> coord(box.offset.begin(), box.offset.end());
  while (true) {
    fn(coord, length);
    size_t d = rank - 1;
    while (true) {
      if (d == 0) return;
      --d;
      if (++coord[d] < box.offset[d] + box.extent[d]) break;
      coord[d] = box.offset[d];
    }
  }
}

int64_t LinearIndex(const planner::Dims& shape, const std::vector<int64_t>& coord) {
  int64_t linear = 0;
  for (size_t d = 0; d < shape.size(); ++d) linear = linear * shape[d] + coord[d];
  return linear;
}

// Row-major element index of `coord` inside a dense buffer holding `box`.
int64_t DenseIndex(const planner::Box& box, const std::vector<int64_t>& coord) {
  int64_t linear = 0;
  for (size_t d = 0; d < coord.size(); ++d) {
    linear = linear * box.extent[d] + (coord[d] - box.offset[d]);
  }
  return linear;
}

int64_t ViewAddress(const planner::ViewInfo& view, int element_bytes,
                    const std::vector<int64_t>& coord) {
  int64_t element = 0;
  for (size_t d = 0; d < coord.size(); ++d) {
    element += (coord[d] - view.box.offset[d]) * view.strides[d];
  }
  return view.byte_offset + element * element_bytes;
}

class ByteChecker {
 public:
  ByteChecker(const planner::Layout& sources, const planner::Layout& destinations,
              const planner::Plan& plan, int64_t max_bytes)
      : src_(sources), dst_(destinations), plan_(plan), max_bytes_(max_bytes) {}

  absl::Status Run(ByteCheckStats* stats) {
    absl::Status s = Allocate(src_, &src_memory_);
    if (s.ok()) s = Allocate(dst_, &dst_memory_);
    if (!s.ok()) return s;
    FillSources();
    for (const planner::Transfer& t : plan_.transfers) {
      s = Execute(t);
      if (!s.ok()) return s;
    }
    s = Verify();
    if (stats != nullptr) {
      stats->allocated_bytes = allocated_;
      stats->checked_bytes = checked_;
    }
    return s;
  }

 private:
  using RankMemory = std::vector<std::vector<uint8_t>>;  // per buffer

  absl::Status Reserve(int64_t bytes) {
    allocated_ += bytes;
    if (allocated_ > max_bytes_) {
      return absl::ResourceExhaustedError(
          absl::StrCat("--verify=bytes needs more than ", max_bytes_,
                       " bytes of host memory for these layouts; use --verify=coverage"));
    }
    return absl::OkStatus();
  }

  absl::Status Allocate(const planner::Layout& layout, std::vector<RankMemory>* memory) {
    memory->resize(layout.ranks.size());
    for (size_t r = 0; r < layout.ranks.size(); ++r) {
      for (const planner::BufferInfo& buffer : layout.ranks[r].buffers) {
        absl::Status s = Reserve(buffer.bytes);
        if (!s.ok()) return s;
        (*memory)[r].emplace_back(buffer.bytes, kPoison);
      }
    }
    return absl::OkStatus();
  }

  void FillSources() {
    std::vector<uint8_t> value(16);
    for (const planner::ViewInfo& view : src_.views) {
      const planner::TensorInfo& tensor = src_.tensors[view.tensor];
      Pattern pattern(NameHash(tensor.name));
      uint8_t* base = src_memory_[view.rank_index][view.buffer].data();
      value.resize(tensor.element_bytes);
      const int eb = tensor.element_bytes;
      const int64_t step = view.strides.back() * eb;
      ForEachRow(view.box, [&](const std::vector<int64_t>& row, int64_t length) {
        const int64_t linear = LinearIndex(tensor.shape, row);
        uint8_t* at = base + ViewAddress(view, eb, row);
        for (int64_t i = 0; i < length; ++i, at += step) {
          pattern.Element(linear + i, eb, value.data());
          CopyElement(at, value.data(), eb);
        }
      });
    }
  }

  // Base address and addressing of one end of a transfer.
  struct Access {
    uint8_t* base = nullptr;
    const planner::ViewInfo* view = nullptr;  // null: a dense buffer holding `dense`
    const planner::Box* dense = nullptr;      // the whole tensor, or a relay buffer's box
  };

  // Memory of one end of a transfer; refuses ends that do not exist or whose view does not
  // hold the whole box, so a broken plan is reported instead of touching stray memory.
  absl::StatusOr<Access> Resolve(const planner::Endpoint& e, int32_t tensor,
                                 const planner::Box& box) {
    const bool source_side = e.IsSourceSide();
    const planner::Layout& layout = source_side ? src_ : dst_;
    std::vector<RankMemory>& memory = source_side ? src_memory_ : dst_memory_;
    const Region wanted = RegionFrom(box.offset.data(), box.extent.data(), box.rank());
    const std::string where = absl::StrCat(dst_.tensors[tensor].name, ": box ", Describe(wanted),
                                           " on ", layout.side, " rank index ", e.rank_index);
    if (e.rank_index < 0 || e.rank_index >= static_cast<int32_t>(layout.ranks.size())) {
      return absl::FailedPreconditionError(absl::StrCat(where, ": no such rank"));
    }
    if (e.kind == EndpointKind::kSourceView || e.kind == EndpointKind::kDestinationView) {
      if (e.index < 0 || e.index >= static_cast<int32_t>(layout.views.size())) {
        return absl::FailedPreconditionError(absl::StrCat(where, ": no such view"));
      }
      const planner::ViewInfo& view = layout.views[e.index];
      const Region held =
          RegionFrom(view.box.offset.data(), view.box.extent.data(), view.box.rank());
      if (view.rank_index != e.rank_index ||
          layout.tensors[view.tensor].name != dst_.tensors[tensor].name ||
          !IsInside(wanted, held)) {
        return absl::FailedPreconditionError(
            absl::StrCat(where, ": outside the view it names (", Describe(held), ")"));
      }
      return Access{memory[view.rank_index][view.buffer].data(), &view};
    }
    const planner::TensorInfo& info = dst_.tensors[tensor];
    const planner::Box* dense = nullptr;
    if (e.kind == EndpointKind::kRelayBuffer) {
      if (e.index < 0 || e.index >= static_cast<int32_t>(plan_.pieces.size()) ||
          plan_.pieces[e.index].tensor != tensor) {
        return absl::FailedPreconditionError(absl::StrCat(where, ": no such relay buffer"));
      }
      dense = &plan_.pieces[e.index].box;
    } else {
      if (e.index != tensor) {
        return absl::FailedPreconditionError(absl::StrCat(where, ": scratch of another tensor"));
      }
      dense = &WholeTensor(tensor);
    }
    if (!IsInside(wanted, RegionFrom(dense->offset.data(), dense->extent.data(), dense->rank()))) {
      return absl::FailedPreconditionError(absl::StrCat(where, ": outside its buffer"));
    }
    // Scratch is keyed by tensor, a relay buffer by the piece it holds.
    auto key = std::make_tuple(e.kind, e.rank_index, e.index);
    auto it = scratch_.find(key);
    if (it == scratch_.end()) {
      const int64_t bytes = BoxBytes(*dense, info.element_bytes);
      absl::Status s = Reserve(bytes);
      if (!s.ok()) return s;
      it = scratch_.emplace(key, std::vector<uint8_t>(bytes, kPoison)).first;
    }
    return Access{it->second.data(), nullptr, dense};
  }

  // The box of a whole tensor (offset 0, its shape), made once.
  const planner::Box& WholeTensor(int32_t tensor) {
    auto it = whole_tensors_.find(tensor);
    if (it == whole_tensors_.end()) {
      planner::Box box;
      for (int64_t d : dst_.tensors[tensor].shape) {
        box.offset.push_back(0);
        box.extent.push_back(d);
      }
      it = whole_tensors_.emplace(tensor, std::move(box)).first;
    }
    return it->second;
  }

  absl::Status Execute(const planner::Transfer& t) {
    if (t.piece < 0 || t.piece >= static_cast<int32_t>(plan_.pieces.size())) {
      return absl::FailedPreconditionError("a transfer names a piece that does not exist");
    }
    const planner::Piece& piece = plan_.pieces[t.piece];
    if (piece.tensor < 0 || piece.tensor >= static_cast<int32_t>(dst_.tensors.size()) ||
        piece.box.rank() != dst_.tensors[piece.tensor].shape.size()) {
      return absl::FailedPreconditionError("a piece names a tensor that does not exist");
    }
    const planner::TensorInfo& tensor = dst_.tensors[piece.tensor];
    absl::StatusOr<Access> from = Resolve(t.src, piece.tensor, piece.box);
    if (!from.ok()) return from.status();
    if (t.dst.kind == EndpointKind::kSourceView) {
      return absl::FailedPreconditionError(absl::StrCat(tensor.name, ": writes a source view"));
    }
    absl::StatusOr<Access> to = Resolve(t.dst, piece.tensor, piece.box);
    if (!to.ok()) return to.status();
    const int eb = tensor.element_bytes;
    auto address = [&](const Access& a, const std::vector<int64_t>& coord) {
      return a.view ? ViewAddress(*a.view, eb, coord) : DenseIndex(*a.dense, coord) * eb;
    };
    auto step = [&](const Access& a) { return a.view ? a.view->strides.back() * eb : eb; };
    const int64_t from_step = step(*from), to_step = step(*to);
    ForEachRow(piece.box, [&](const std::vector<int64_t>& row, int64_t length) {
      const uint8_t* src = from->base + address(*from, row);
      uint8_t* dst = to->base + address(*to, row);
      if (from_step == eb && to_step == eb) {
        std::memcpy(dst, src, length * eb);
        return;
      }
      for (int64_t i = 0; i < length; ++i, src += from_step, dst += to_step) {
        CopyElement(dst, src, eb);
      }
    });
    return absl::OkStatus();
  }

  absl::Status Verify() {
    std::vector<uint8_t> expected(16);
    for (size_t r = 0; r < dst_.ranks.size(); ++r) {
      // Which bytes of each buffer belong to a view; the rest must stay poison.
      std::vector<std::vector<uint8_t>> owned;
      for (const auto& buffer : dst_memory_[r]) owned.emplace_back(buffer.size(), 0);
      for (int32_t v : dst_.ranks[r].views) {
        const planner::ViewInfo& view = dst_.views[v];
        const planner::TensorInfo& tensor = dst_.tensors[view.tensor];
        Pattern pattern(NameHash(tensor.name));
        const uint8_t* base = dst_memory_[r][view.buffer].data();
        expected.resize(tensor.element_bytes);
        std::string failure;
        const int eb = tensor.element_bytes;
        const int64_t step = view.strides.back() * eb;
        uint8_t* mask = owned[view.buffer].data();
        ForEachRow(view.box, [&](const std::vector<int64_t>& row, int64_t length) {
          const int64_t linear = LinearIndex(tensor.shape, row);
          int64_t at = ViewAddress(view, eb, row);
          for (int64_t i = 0; i < length; ++i, at += step) {
            for (int b = 0; b < eb; ++b) mask[at + b] = 1;
            if (!failure.empty()) continue;
            pattern.Element(linear + i, eb, expected.data());
            if (!SameElement(base + at, expected.data(), eb)) {
              std::vector<int64_t> coord = row;
              coord.back() += i;
              failure = absl::StrCat(
                  tensor.name, ": destination rank ", dst_.ranks[r].rank, " box ",
                  planner::FormatBox(view.box), ": element [", absl::StrJoin(coord, ", "),
                  base[at] == kPoison ? "] was never written" : "] holds the wrong value");
            }
          }
        });
        if (!failure.empty()) return absl::FailedPreconditionError(failure);
        checked_ += view.bytes;
      }
      for (size_t b = 0; b < owned.size(); ++b) {
        for (size_t i = 0; i < owned[b].size(); ++i) {
          if (!owned[b][i] && dst_memory_[r][b][i] != kPoison) {
            return absl::FailedPreconditionError(absl::StrCat(
                "destination rank ", dst_.ranks[r].rank, ": byte ", i, " of buffer \"",
                dst_.ranks[r].buffers[b].name, "\" lies outside every view but was written"));
          }
        }
      }
    }
    return absl::OkStatus();
  }

  const planner::Layout& src_;
  const planner::Layout& dst_;
  const planner::Plan& plan_;
  const int64_t max_bytes_;
  int64_t allocated_ = 0;
  int64_t checked_ = 0;
  std::vector<RankMemory> src_memory_;
  std::vector<RankMemory> dst_memory_;
  std::map<std::tuple<EndpointKind, int32_t, int32_t>, std::vector<uint8_t>> scratch_;
  std::map<int32_t, planner::Box> whole_tensors_;
};

}  // namespace

absl::Status CheckBytes(const planner::Layout& sources, const planner::Layout& destinations,
                        const planner::Plan& plan, int64_t max_bytes, ByteCheckStats* stats) {
  return ByteChecker(sources, destinations, plan, max_bytes).Run(stats);
}

}  // namespace refit::check

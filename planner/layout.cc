#include "planner/layout.h"

#include <algorithm>
#include <limits>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "planner/dtype.h"
#include "planner/memory_overlap.h"
#include "xxhash.h"

namespace refit::planner {
namespace {

constexpr int64_t kMaxTensorBytes = int64_t{1} << 60;
// Per rank: about a quarter second of overlap checks.
constexpr int64_t kMaxViewPairsChecked = int64_t{1} << 22;

absl::Status Invalid(const std::string& side, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(side, " layout: ", what));
}

std::string DimsText(const google::protobuf::RepeatedField<int64_t>& dims) {
  return absl::StrCat("[", absl::StrJoin(dims, ", "), "]");
}

absl::Status CompileTensors(const v1::LayoutSpec& spec, Layout* layout) {
  const std::string& side = layout->side;
  if (spec.tensors().empty()) return Invalid(side, "is empty: it declares no tensors");
  for (const v1::TensorSpec& t : spec.tensors()) {
    if (t.name().empty()) return Invalid(side, "a tensor has no name");
    TensorInfo info;
    info.name = t.name();
    info.dtype = t.dtype();
    absl::StatusOr<int> bytes = DtypeBytes(t.dtype());
    if (!bytes.ok()) return Invalid(side, absl::StrCat(t.name(), ": ", bytes.status().message()));
    info.element_bytes = *bytes;
    if (t.shape().empty()) return Invalid(side, absl::StrCat(t.name(), ": shape has no dims"));
    int64_t volume_bytes = info.element_bytes;
    for (int64_t dim : t.shape()) {
      if (dim <= 0) {
        return Invalid(side, absl::StrCat(t.name(), ": shape ", DimsText(t.shape()),
                                          " has a dim that is not positive"));
      }
      if (volume_bytes > kMaxTensorBytes / dim) {
        return Invalid(side, absl::StrCat(t.name(), ": shape ", DimsText(t.shape()),
                                          " overflows (more than 2^60 bytes)"));
      }
      volume_bytes *= dim;
      info.shape.push_back(dim);
    }
    if (!layout->tensor_by_name.emplace(info.name, layout->tensors.size()).second) {
      return Invalid(side, absl::StrCat(t.name(), ": tensor declared twice"));
    }
    layout->tensors.push_back(std::move(info));
  }
  return absl::OkStatus();
}

// A view's bytes, byte_offset included, stay below 2^60: every product and sum of its
// span is checked, so a stride or byte_offset near 2^63 is refused instead of wrapping into
// a small end that would pass the buffer-size check. Everything downstream (overlap checks,
// the planner, the data plane) then computes within int64.
template <typename Where>
absl::Status CheckViewSpan(const v1::ShardView& v, const TensorInfo& tensor, const Where& where,
                           const Dims& strides) {
  int64_t last_element = 0;
  int64_t span_bytes = 0;
  bool overflow = false;
  for (size_t d = 0; d < strides.size() && !overflow; ++d) {
    int64_t step = 0;
    overflow = __builtin_mul_overflow(v.extent(d) - 1, strides[d], &step) ||
               __builtin_add_overflow(last_element, step, &last_element);
  }
  overflow = overflow || __builtin_add_overflow(last_element, 1, &last_element) ||
             __builtin_mul_overflow(last_element, tensor.element_bytes, &span_bytes) ||
             span_bytes > kMaxTensorBytes || v.byte_offset() > kMaxTensorBytes - span_bytes;
  if (!overflow) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      where(), ": view offset ", DimsText(v.offset()), " extent ", DimsText(v.extent()),
      " with strides ", DimsText(v.strides()), " and byte_offset ", v.byte_offset(),
      " reaches past byte 2^60 (the strides or byte_offset overflow)"));
}

// Checks a view's box against its tensor and fills box/strides/bytes.
template <typename Where>
absl::Status CompileViewGeometry(const v1::ShardView& v, const TensorInfo& tensor,
                                 const Where& where, ViewInfo* view) {
  const size_t rank = tensor.shape.size();
  if (static_cast<size_t>(v.offset_size()) != rank ||
      static_cast<size_t>(v.extent_size()) != rank) {
    return absl::InvalidArgumentError(absl::StrCat(where(), ": view offset ", DimsText(v.offset()),
                                                   " / extent ", DimsText(v.extent()),
                                                   " does not match the tensor's ", rank, " dims"));
  }
  view->box.offset.assign(v.offset().begin(), v.offset().end());
  view->box.extent.assign(v.extent().begin(), v.extent().end());
  auto box_text = [&]() {
    return absl::StrCat("offset ", DimsText(v.offset()), " extent ", DimsText(v.extent()));
  };
  for (size_t d = 0; d < rank; ++d) {
    if (v.offset(d) < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(where(), ": view ", box_text(), " has a negative offset"));
    }
    if (v.extent(d) < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(where(), ": view ", box_text(), " has a negative extent"));
    }
    if (v.offset(d) > tensor.shape[d] - v.extent(d)) {
      return absl::InvalidArgumentError(absl::StrCat(where(), ": view box ", FormatBox(view->box),
                                                     " lies outside the global shape [",
                                                     absl::StrJoin(tensor.shape, ", "), "]"));
    }
  }
  if (v.strides().empty()) {
    view->strides.assign(rank, 1);
    for (size_t d = rank; d-- > 1;) view->strides[d - 1] = view->strides[d] * v.extent(d);
  } else {
    if (static_cast<size_t>(v.strides_size()) != rank) {
      return absl::InvalidArgumentError(absl::StrCat(where(), ": view ", FormatBox(view->box),
                                                     " has ", v.strides_size(), " strides for ",
                                                     rank, " dims"));
    }
    view->strides.assign(v.strides().begin(), v.strides().end());
    for (int64_t s : view->strides) {
      if (s <= 0) {
        return absl::InvalidArgumentError(absl::StrCat(where(), ": view ", FormatBox(view->box),
                                                       " has a stride that is not positive"));
      }
    }
  }
  if (v.byte_offset() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(where(), ": view ", FormatBox(view->box), " has a negative byte_offset"));
  }
  if (view->box.Empty()) {  // spans no bytes: nothing to check against its buffer
    view->byte_offset = v.byte_offset();
    view->bytes = 0;
    return absl::OkStatus();
  }
  // Before anything multiplies strides: a stride near 2^63 must not wrap.
  absl::Status spanned = CheckViewSpan(v, tensor, where, view->strides);
  if (!spanned.ok()) return spanned;
  if (!v.strides().empty() && StridesAlias(view->box.extent, view->strides)) {
    return absl::InvalidArgumentError(
        absl::StrCat(where(), ": view ", FormatBox(view->box), " has strides ",
                     DimsText(v.strides()), " that alias (two elements would share memory)"));
  }
  view->byte_offset = v.byte_offset();
  view->bytes = view->box.Volume() * tensor.element_bytes;
  return absl::OkStatus();
}

StridedRegion RegionOf(const Layout& layout, const ViewInfo& view) {
  return StridedRegion{view.byte_offset, view.box.extent, view.strides,
                       layout.tensors[view.tensor].element_bytes};
}

// Sizes undeclared buffers, then checks every view fits and (destinations) no two views
// share memory.
absl::Status CheckBuffers(Layout* layout, int32_t rank_index,
                          const absl::flat_hash_set<int32_t>& declared) {
  RankInfo& rank = layout->ranks[rank_index];
  std::vector<std::vector<int32_t>> views_by_buffer(rank.buffers.size());
  for (int32_t v : rank.views) {
    const ViewInfo& view = layout->views[v];
    const int64_t end = RegionEndByte(RegionOf(*layout, view));
    BufferInfo& buffer = rank.buffers[view.buffer];
    if (declared.contains(view.buffer)) {
      if (end > buffer.bytes) {
        return absl::InvalidArgumentError(
            absl::StrCat(layout->side, " layout: ", layout->TensorOf(view).name, ": rank ",
                         rank.rank, ": view ", FormatBox(view.box), " ends at byte ", end,
                         ", outside buffer \"", buffer.name, "\" of ", buffer.bytes, " bytes"));
      }
    } else {
      buffer.bytes = std::max(buffer.bytes, end);
    }
    views_by_buffer[view.buffer].push_back(v);
  }
  // Source views are only read, so they may share memory: tied weights (one storage
  // registered as both the embedding and the output head) are two views of it. Two
  // destination views in one place would be two writes into it.
  if (layout->side != "destination") return absl::OkStatus();
  // Views are compared only with those starting inside their byte span, which for dense
  // and fused views is a neighbour or two; views whose spans all interleave (strided
  // columns of one matrix) would make that quadratic, so a rank gets a budget of pair
  // checks and a layout past it is refused rather than validated for minutes.
  int64_t pairs_checked = 0;
  for (std::vector<int32_t>& views : views_by_buffer) {
    std::sort(views.begin(), views.end(), [&](int32_t a, int32_t b) {
      return layout->views[a].byte_offset < layout->views[b].byte_offset;
    });
    for (size_t i = 0; i < views.size(); ++i) {
      const ViewInfo& a = layout->views[views[i]];
      const StridedRegion region_a = RegionOf(*layout, a);
      const int64_t end_a = RegionEndByte(region_a);
      for (size_t j = i + 1; j < views.size(); ++j) {
        const ViewInfo& b = layout->views[views[j]];
        if (b.byte_offset >= end_a) break;
        if (++pairs_checked > kMaxViewPairsChecked) {
          return absl::InvalidArgumentError(absl::StrCat(
              layout->side, " layout: rank ", rank.rank, ": buffer \"",
              rank.buffers[a.buffer].name, "\" holds ", views.size(),
              " views whose byte spans interleave: proving them disjoint takes more than ",
              kMaxViewPairsChecked, " comparisons (give interleaved views buffers of their own)"));
        }
        if (MayOverlap(region_a, RegionOf(*layout, b))) {
          return absl::InvalidArgumentError(absl::StrCat(
              layout->side, " layout: rank ", rank.rank, ": views ", layout->TensorOf(a).name, " ",
              FormatBox(a.box), " and ", layout->TensorOf(b).name, " ", FormatBox(b.box),
              " overlap in buffer \"", rank.buffers[a.buffer].name, "\""));
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CompileRank(const v1::RankLayout& r, int32_t rank_index, Layout* layout) {
  RankInfo rank;
  rank.rank = r.rank();
  rank.host = r.host();
  rank.device = r.device();
  rank.bucketed = r.bucketed();
  const std::string& side = layout->side;
  if (r.rank() < 0) return Invalid(side, absl::StrCat("rank ", r.rank(), " is negative"));
  if (r.bucketed() && side != "destination") {
    return Invalid(side, absl::StrCat("rank ", r.rank(),
                                      ": only destination ranks receive their weights in buckets"));
  }
  if (r.pauses_for_writes() && side != "destination") {
    return Invalid(side, absl::StrCat("rank ", r.rank(),
                                      ": only destination ranks pause their engines for writes"));
  }
  if (r.bucketed() && r.staged()) {
    return Invalid(side, absl::StrCat("rank ", r.rank(),
                                      ": a bucketed rank cannot be staged (its process copies "
                                      "each bucket in as it arrives)"));
  }
  absl::flat_hash_map<std::string, int32_t> buffer_by_name;
  absl::flat_hash_set<int32_t> declared;
  for (const v1::BufferSpec& b : r.buffers()) {
    if (b.name().empty() || b.bytes() <= 0) {
      return Invalid(side, absl::StrCat("rank ", r.rank(), ": buffer \"", b.name(),
                                        "\" needs a name and a positive size"));
    }
    if (!buffer_by_name.emplace(b.name(), rank.buffers.size()).second) {
      return Invalid(side,
                     absl::StrCat("rank ", r.rank(), ": buffer \"", b.name(), "\" declared twice"));
    }
    declared.insert(rank.buffers.size());
    rank.buffers.push_back(BufferInfo{b.name(), b.bytes()});
  }
  layout->ranks.push_back(std::move(rank));
  for (int i = 0; i < r.views_size(); ++i) {
    const v1::ShardView& v = r.views(i);
    auto tensor_it = layout->tensor_by_name.find(v.tensor());
    if (tensor_it == layout->tensor_by_name.end()) {
      return Invalid(side, absl::StrCat(v.tensor(), ": rank ", r.rank(),
                                        " has a view of a tensor the layout does not declare"));
    }
    if (r.bucketed() && !v.buffer().empty()) {
      return Invalid(side, absl::StrCat(v.tensor(), ": rank ", r.rank(),
                                        " is bucketed: its views name no buffer (refitd "
                                        "does not hold their memory), this one names \"",
                                        v.buffer(), "\""));
    }
    ViewInfo view;
    view.rank_index = rank_index;
    view.local_index = i;
    view.tensor = tensor_it->second;
    auto where = [&]() { return absl::StrCat(side, " layout: ", v.tensor(), ": rank ", r.rank()); };
    absl::Status geometry = CompileViewGeometry(v, layout->tensors[view.tensor], where, &view);
    if (!geometry.ok()) return geometry;
    // A view with no elements (the trailing ranks of a small tensor under torch.chunk,
    // DTensor or FSDP2) holds nothing and needs nothing: nothing plans it or reads it.
    if (view.box.Empty()) continue;
    RankInfo& rank_info = layout->ranks[rank_index];
    if (v.buffer().empty()) {
      view.buffer = rank_info.buffers.size();
      rank_info.buffers.push_back(BufferInfo{absl::StrCat("#view", i), 0});
    } else {
      auto [it, inserted] = buffer_by_name.emplace(v.buffer(), rank_info.buffers.size());
      if (inserted) rank_info.buffers.push_back(BufferInfo{v.buffer(), 0});
      view.buffer = it->second;
    }
    rank_info.views.push_back(layout->views.size());
    layout->views.push_back(std::move(view));
  }
  return CheckBuffers(layout, rank_index, declared);
}

uint64_t DigestOf(const Layout& layout) {
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  auto add_int = [&](int64_t value) { XXH3_64bits_update(state, &value, sizeof(value)); };
  auto add_str = [&](const std::string& s) {
    add_int(s.size());
    XXH3_64bits_update(state, s.data(), s.size());
  };
  auto add_dims = [&](const Dims& dims) {
    add_int(dims.size());
    XXH3_64bits_update(state, dims.data(), dims.size() * sizeof(int64_t));
  };
  add_str(layout.side);
  for (const TensorInfo& t : layout.tensors) {
    add_str(t.name);
    add_str(t.dtype);
    add_dims(t.shape);
  }
  for (const RankInfo& r : layout.ranks) {
    add_int(r.rank);
    add_str(r.host);
    add_int(r.device);
    if (r.bucketed) add_str("bucketed");  // digests of other layouts stay as they were
    for (const BufferInfo& b : r.buffers) {
      add_str(b.name);
      add_int(b.bytes);
    }
  }
  for (const ViewInfo& v : layout.views) {
    add_int(v.rank_index);
    add_int(v.tensor);
    add_int(v.buffer);
    add_dims(v.box.offset);
    add_dims(v.box.extent);
    add_int(v.byte_offset);
    add_dims(v.strides);
  }
  const uint64_t digest = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  return digest;
}

}  // namespace

absl::StatusOr<Layout> CompileLayout(const v1::LayoutSpec& spec, const std::string& side) {
  Layout layout;
  layout.side = side;
  absl::Status status = CompileTensors(spec, &layout);
  if (!status.ok()) return status;
  if (spec.ranks().empty()) return Invalid(side, "is empty: it declares no ranks");
  if (spec.ranks_size() > kMaxRanksPerSide) {
    return Invalid(side, absl::StrCat("declares ", spec.ranks_size(), " ranks, more than the ",
                                      kMaxRanksPerSide, " a side may have"));
  }
  // Sized once: growing a list of a million views by doubling holds it twice at a time.
  size_t num_views = 0;
  for (const v1::RankLayout& r : spec.ranks()) num_views += r.views_size();
  layout.views.reserve(num_views);
  layout.ranks.reserve(spec.ranks_size());
  absl::flat_hash_set<int64_t> rank_ids;
  for (const v1::RankLayout& r : spec.ranks()) {
    if (!rank_ids.insert(r.rank()).second) {
      return Invalid(side, absl::StrCat("rank ", r.rank(), " is declared twice"));
    }
    status = CompileRank(r, layout.ranks.size(), &layout);
    if (!status.ok()) return status;
  }
  layout.digest = DigestOf(layout);
  return layout;
}

int64_t ElementByteOffset(const ViewInfo& view, int element_bytes, const Dims& coord) {
  int64_t element = 0;
  for (size_t d = 0; d < coord.size(); ++d) {
    element += (coord[d] - view.box.offset[d]) * view.strides[d];
  }
  return view.byte_offset + element * element_bytes;
}

}  // namespace refit::planner

#include "transport/buffer_map.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "planner/box.h"
#include "planner/dtype.h"
#include "transport/gpu/cuda_ipc_buffer.h"
#include "transport/host_memory.h"
#include "transport/memory_fault_guard.h"
#include "transport/quantized_view.h"

namespace refit::transport {
namespace {

// One past the last byte the view touches, or an error when that passes `buffer_bytes`;
// every product and sum is checked, so no stride or byte_offset can wrap into range.
absl::StatusOr<int64_t> ViewEndByte(int64_t byte_offset, const MappedView& view,
                                    int64_t buffer_bytes) {
  int64_t last = 0;
  bool overflow = byte_offset < 0;
  for (size_t d = 0; d < view.extent.size() && !overflow; ++d) {
    int64_t step = 0;
    overflow = __builtin_mul_overflow(view.extent[d] - 1, view.strides[d], &step) ||
               __builtin_add_overflow(last, step, &last);
  }
  int64_t end = 0;
  overflow = overflow || __builtin_add_overflow(last, 1, &last) ||
             __builtin_mul_overflow(last, view.element_bytes, &end) ||
             __builtin_add_overflow(end, byte_offset, &end);
  if (overflow) return absl::OutOfRangeError("its byte range overflows 64 bits");
  if (end > buffer_bytes) return absl::OutOfRangeError(absl::StrCat("ends at byte ", end));
  return end;
}

}  // namespace

absl::Status BufferMap::DeclareTensor(v1::Role role, const std::string& name,
                                      const TensorShape& shape) {
  auto [it, inserted] = declared_[SideOf(role)].emplace(name, shape);
  if (inserted ||
      (it->second.element_bytes == shape.element_bytes && it->second.shape == shape.shape)) {
    return absl::OkStatus();
  }
  auto text = [](const TensorShape& t) {
    return absl::StrCat(t.element_bytes, "-byte elements, shape [", absl::StrJoin(t.shape, ", "),
                        "]");
  };
  return absl::InvalidArgumentError(absl::StrCat(
      name, ": declared again with a different dtype or shape (", text(shape),
      "; another rank of this side on this node declared ", text(it->second),
      "): the ranks of a side on one node share one declaration of each tensor, so a replica "
      "of another format needs a node, or a job, of its own"));
}

absl::StatusOr<TensorTable> TensorTableOf(const v1::LayoutSpec& spec) {
  TensorTable tensors;
  for (const v1::TensorSpec& t : spec.tensors()) {
    absl::StatusOr<int> bytes = planner::DtypeBytes(t.dtype());
    if (!bytes.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor \"", t.name(), "\": ", bytes.status().message()));
    }
    tensors[t.name()] = TensorShape{*bytes, Dims(t.shape().begin(), t.shape().end())};
  }
  return tensors;
}

absl::Status BufferMap::AddRank(v1::Role role, const v1::RankLayout& layout,
                                const TensorTable* rank_tensors) {
  absl::StatusOr<OpenedRank> opened = OpenRank(role, layout);
  if (!opened.ok()) return opened.status();
  return AddRank(role, layout, rank_tensors, *std::move(opened));
}

absl::Status BufferMap::AddRank(v1::Role role, const v1::RankLayout& layout,
                                const TensorTable* rank_tensors, OpenedRank opened) {
  const std::string who = RankName(role, layout.rank());
  if (ranks_.count({role, layout.rank()})) {
    return absl::AlreadyExistsError(absl::StrCat(who, " is already registered"));
  }
  // The rank's tensors join the table for resolving its views, and leave it again if the
  // rank is refused.
  std::vector<std::string> added_tensors;
  auto forget_added = [&]() {
    for (const std::string& name : added_tensors) declared_[SideOf(role)].erase(name);
  };
  if (rank_tensors != nullptr) {
    for (const auto& [name, shape] : *rank_tensors) {
      const bool known = declared_[SideOf(role)].contains(name);
      absl::Status declared = DeclareTensor(role, name, shape);
      if (!declared.ok()) {
        forget_added();
        return absl::Status(declared.code(), absl::StrCat(who, ": ", declared.message()));
      }
      if (!known) added_tensors.push_back(name);
    }
  }
  absl::Status added = MapRank(role, layout, std::move(opened));
  if (!added.ok()) {
    forget_added();
    return added;
  }
  if (rank_tensors != nullptr) {
    RankMemory& memory = ranks_.at({role, layout.rank()});
    for (const auto& [name, shape] : *rank_tensors) {
      memory.declared_tensors.push_back(name);
      ++tensor_users_[SideOf(role)][name];
    }
  }
  RefreshTensors();
  return absl::OkStatus();
}

absl::StatusOr<BufferMap::OpenedRank> BufferMap::OpenRank(v1::Role role,
                                                          const v1::RankLayout& layout) {
  const std::string who = RankName(role, layout.rank());
  OpenedRank memory;
  if (layout.bucketed()) {
    if (role != v1::ROLE_DESTINATION || layout.staged()) {
      return absl::InvalidArgumentError(
          absl::StrCat(who, ": only destination ranks, not staged, can be bucketed"));
    }
    if (layout.buffers_size() != 1 || layout.buffers(0).shm_name().empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          who, ": a bucketed rank registers one buffer, its staging bucket, in shared memory"));
    }
    if (layout.buffers(0).bytes() < kMinBucketBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat(who, ": its bucket of ", layout.buffers(0).bytes(),
                       " bytes is too small (at least ", kMinBucketBytes, ")"));
    }
  }
  for (const v1::BufferSpec& buffer : layout.buffers()) {
    if (buffer.shm_name().empty() == buffer.cuda_ipc_handle().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(who, ": buffer \"", buffer.name(),
                       "\" needs either a shared-memory name or a CUDA IPC handle"));
    }
    absl::StatusOr<std::unique_ptr<MappedBuffer>> segment =
        buffer.shm_name().empty()
            ? gpu::OpenCudaIpcBuffer(buffer.cuda_ipc_handle(), buffer.bytes(), layout.device())
            : absl::StatusOr<std::unique_ptr<MappedBuffer>>(
                  SharedMemorySegment::Open(buffer.shm_name(), buffer.bytes()));
    if (!segment.ok()) {
      return absl::Status(
          segment.status().code(),
          absl::StrCat(who, ": buffer \"", buffer.name(), "\": ", segment.status().message()));
    }
    memory.segments.push_back(std::move(*segment));
    memory.segment_names.push_back(buffer.name());
  }
  if (layout.staged()) {
    if (role != v1::ROLE_DESTINATION) {
      return absl::InvalidArgumentError(
          absl::StrCat(who, ": only destination ranks can be staged"));
    }
    for (int i = 0; i < layout.buffers_size(); ++i) {
      const MappedBuffer& segment = *memory.segments[i];
      if (segment.device() >= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(who, ": buffer \"", layout.buffers(i).name(),
                         "\" is GPU memory; staged ranks need host (shared-memory) buffers"));
      }
      absl::StatusOr<std::unique_ptr<HostMemory>> shadow = HostMemory::Allocate(segment.bytes());
      if (!shadow.ok()) {
        return absl::Status(shadow.status().code(),
                            absl::StrCat(who, ": shadow of buffer \"", layout.buffers(i).name(),
                                         "\": ", shadow.status().message()));
      }
      memory.shadows.push_back(std::move(*shadow));
    }
  }
  return memory;
}

absl::Status BufferMap::MapRank(v1::Role role, const v1::RankLayout& layout, OpenedRank opened) {
  const std::string who = RankName(role, layout.rank());
  if (opened.segments.size() != static_cast<size_t>(layout.buffers_size())) {
    return absl::InternalError(absl::StrCat(who, ": its memory was opened for another layout"));
  }
  RankMemory memory;
  memory.bucketed = layout.bucketed();
  memory.segments = std::move(opened.segments);
  memory.segment_names = std::move(opened.segment_names);
  memory.shadows = std::move(opened.shadows);
  absl::flat_hash_map<std::string, int> segment_of;
  for (size_t i = 0; i < memory.segment_names.size(); ++i) segment_of[memory.segment_names[i]] = i;
  for (int i = 0; i < layout.views_size(); ++i) {
    const v1::ShardView& v = layout.views(i);
    const std::string where = absl::StrCat(who, ": view ", i, " (", v.tensor(), ")");
    auto tensor = declared_[SideOf(role)].find(v.tensor());
    if (tensor == declared_[SideOf(role)].end()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": unknown tensor"));
    }
    const size_t dims = tensor->second.shape.size();
    if (static_cast<size_t>(v.offset_size()) != dims ||
        static_cast<size_t>(v.extent_size()) != dims ||
        (v.strides_size() != 0 && static_cast<size_t>(v.strides_size()) != dims)) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": needs ", dims, " dims"));
    }
    auto segment = segment_of.find(v.buffer());
    if (layout.bucketed()) {
      if (!v.buffer().empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": names buffer \"", v.buffer(), "\" but the rank is bucketed"));
      }
    } else if (segment == segment_of.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": buffer \"", v.buffer(), "\" is not registered"));
    }
    MappedView view;
    view.tensor = v.tensor();
    view.offset.assign(v.offset().begin(), v.offset().end());
    view.extent.assign(v.extent().begin(), v.extent().end());
    view.strides = v.strides().empty() ? RowMajorStrides(view.extent)
                                       : Dims(v.strides().begin(), v.strides().end());
    view.element_bytes = tensor->second.element_bytes;
    for (size_t d = 0; d < dims; ++d) {
      if (view.extent[d] < 0 || view.strides[d] <= 0 || view.offset[d] < 0 ||
          view.offset[d] > tensor->second.shape[d] - view.extent[d]) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": bad box or strides"));
      }
    }
    if (layout.bucketed()) {  // its bytes pass through the bucket: no memory to map
      memory.views.push_back(std::move(view));
      continue;
    }
    const MappedBuffer& mapped = *memory.segments[segment->second];
    // A view with no elements (a trailing torch.chunk shard) spans no bytes: plans never
    // name it, so it only keeps the view ids of the rank's other views in place.
    const bool empty = HoldsNothing(view.extent);
    absl::StatusOr<int64_t> end =
        empty ? absl::StatusOr<int64_t>(0) : ViewEndByte(v.byte_offset(), view, mapped.bytes());
    if (!end.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", end.status().message(),
                                                     ", outside buffer \"", v.buffer(), "\" of ",
                                                     mapped.bytes(), " bytes"));
    }
    const int64_t byte_offset = empty ? 0 : v.byte_offset();
    view.base = mapped.data() + byte_offset;
    view.device = mapped.device();
    if (layout.staged()) {
      memory.committed_bases.push_back(view.base);
      view.base = memory.shadows[segment->second]->data() + byte_offset;
    }
    memory.views.push_back(std::move(view));
  }
  ranks_.emplace(RankKey{role, layout.rank()}, std::move(memory));
  return absl::OkStatus();
}

absl::Status BufferMap::CheckBacked() const {
  for (const auto& [key, memory] : ranks_) {
    for (size_t i = 0; i < memory.segments.size(); ++i) {
      absl::Status backed = memory.segments[i]->CheckBacked();
      if (!backed.ok()) {
        return absl::Status(backed.code(),
                            absl::StrCat(key.Name(), ": buffer \"", memory.segment_names[i],
                                         "\": ", backed.message()));
      }
    }
  }
  return absl::OkStatus();
}

bool BufferMap::StillNamed(v1::Role role, int64_t rank) const {
  auto it = ranks_.find({role, rank});
  if (it == ranks_.end()) return false;
  for (const std::unique_ptr<MappedBuffer>& segment : it->second.segments) {
    if (!segment->StillNamed()) return false;
  }
  return true;
}

void BufferMap::RemoveRank(v1::Role role, int64_t rank) {
  auto it = ranks_.find({role, rank});
  if (it == ranks_.end()) return;
  const int side = SideOf(role);
  for (const std::string& name : it->second.declared_tensors) {
    if (--tensor_users_[side][name] == 0) {
      tensor_users_[side].erase(name);
      // No rank of its side declares it any more: a changed model may follow.
      if (!pinned_tensors_.contains(name)) declared_[side].erase(name);
    }
  }
  ranks_.erase(it);
  RefreshTensors();
}

absl::Status BufferMap::SendQuantized(const std::vector<v1::QuantizedSource>& views) {
  return UseQuantized(v1::ROLE_SOURCE, views);
}

absl::Status BufferMap::ReceiveQuantized(const std::vector<v1::QuantizedSource>& views) {
  return UseQuantized(v1::ROLE_DESTINATION, views);
}

absl::StatusOr<std::vector<MappedView>> BufferMap::QuantizedViewsOf(
    const RankKey& key, const RankMemory& memory,
    const std::vector<const v1::QuantizedSource*>& wanted,
    std::vector<std::shared_ptr<const QuantizedView>>* quantized) {
  const bool sent = key.role == v1::ROLE_SOURCE;
  std::vector<MappedView> views = memory.views;  // as the plan moves them
  const int32_t registered = static_cast<int32_t>(memory.views.size());
  for (const v1::QuantizedSource* q : wanted) {
    const bool scaled = q->scale_view() >= 0;  // a cast has no scales
    // Sent or dequantized: the codes and scales are kept here, the scales a view the plan
    // appends. Quantized on arrival: the scales are a view the rank registered.
    const bool kept = sent || q->scheme() == "dequantize";
    const bool scale_view_fits =
        kept ? !scaled || q->scale_view() == static_cast<int32_t>(views.size())
             : scaled && q->scale_view() < registered;
    if (q->view() < 0 || q->view() >= registered || !scale_view_fits) {
      return absl::InvalidArgumentError(
          absl::StrCat(RankName(key.role, key.rank), ": the plan quantizes view ", q->view(),
                       " with scales as view ", q->scale_view(), ", which the rank's ", registered,
                       " views do not allow"));
    }
    if (!sent && memory.bucketed) {
      return absl::InvalidArgumentError(absl::StrCat(
          RankName(key.role, key.rank), ": the plan quantizes view ", q->view(),
          " on arrival, but the rank receives its weights in buckets (no memory here)"));
    }
    absl::StatusOr<std::unique_ptr<QuantizedView>> view =
        sent   ? QuantizedView::Make(*q, memory.views[q->view()])
        : kept ? QuantizedView::MakeDequantizing(*q, memory.views[q->view()])
               : QuantizedView::MakeOnArrival(*q, memory.views[q->view()],
                                              memory.views[q->scale_view()]);
    if (!view.ok()) return view.status();
    if (kept) {
      views[q->view()] = (*view)->codes();
      if ((*view)->has_scales()) views.push_back((*view)->scales());
    } else {
      views[q->view()] = (*view)->wide();
    }
    ++quantized_allocations_[SideOf(key.role)];
    quantized->push_back(std::move(*view));
  }
  return views;
}

absl::Status BufferMap::UseQuantized(v1::Role role, const std::vector<v1::QuantizedSource>& views) {
  std::map<int64_t, std::vector<const v1::QuantizedSource*>> by_rank;
  for (const v1::QuantizedSource& q : views) by_rank[q.rank()].push_back(&q);
  absl::Status outcome;
  bool changed = false;  // the tables tensors() gives follow only a change
  for (auto& [key, memory] : ranks_) {
    if (key.role != role) continue;
    std::vector<const v1::QuantizedSource*> wanted;
    if (auto it = by_rank.find(key.rank); it != by_rank.end()) wanted = it->second;
    std::sort(wanted.begin(), wanted.end(),
              [](const v1::QuantizedSource* a, const v1::QuantizedSource* b) {
                return std::make_pair(a->scale_view(), a->view()) <
                       std::make_pair(b->scale_view(), b->view());
              });
    bool same = wanted.size() == memory.quantized.size();
    for (size_t i = 0; same && i < wanted.size(); ++i) {
      same = wanted[i]->SerializeAsString() == memory.quantized[i]->spec().SerializeAsString();
    }
    if (same) continue;
    changed = true;
    if (!memory.registered_views.empty()) memory.views = std::move(memory.registered_views);
    memory.registered_views.clear();
    memory.quantized.clear();
    if (wanted.empty()) continue;
    std::vector<std::shared_ptr<const QuantizedView>> quantized;
    absl::StatusOr<std::vector<MappedView>> moved =
        QuantizedViewsOf(key, memory, wanted, &quantized);
    if (!moved.ok()) {
      if (outcome.ok()) outcome = moved.status();
      continue;
    }
    memory.registered_views = std::exchange(memory.views, *std::move(moved));
    memory.quantized = std::move(quantized);
  }
  if (changed) RefreshTensors();
  return outcome;
}

void BufferMap::RefreshTensors() {
  tensors_ = declared_[SideOf(v1::ROLE_SOURCE)];
  for (const auto& [name, shape] : declared_[SideOf(v1::ROLE_DESTINATION)]) tensors_[name] = shape;
  for (const auto& [key, memory] : ranks_) {
    const TensorTable& declared = declared_[SideOf(key.role)];
    for (const std::shared_ptr<const QuantizedView>& view : memory.quantized) {
      const v1::QuantizedSource& spec = view->spec();
      auto tensor = declared.find(spec.tensor());
      if (tensor == declared.end()) continue;
      if (key.role == v1::ROLE_DESTINATION && spec.scheme() != "dequantize") {
        // Received in the sources' dtype.
        tensors_[spec.tensor()] = TensorShape{view->wide().element_bytes, tensor->second.shape};
        continue;
      }
      tensors_[spec.tensor()] = TensorShape{view->codes().element_bytes, tensor->second.shape};
      if (!view->has_scales()) continue;
      tensors_[spec.scale_tensor()] = TensorShape{
          4,
          planner::BlockGrid(tensor->second.shape, Dims(spec.block().begin(), spec.block().end()))};
    }
  }
}

absl::StatusOr<int64_t> BufferMap::QuantizeSent(int threads) {
  return QuantizeOf(v1::ROLE_SOURCE, threads);
}

absl::StatusOr<int64_t> BufferMap::QuantizeReceived(int threads) {
  return QuantizeOf(v1::ROLE_DESTINATION, threads);
}

absl::StatusOr<int64_t> BufferMap::QuantizeOf(v1::Role role, int threads) {
  std::vector<const QuantizedView*> views;
  int64_t bytes = 0;
  for (const auto& [key, memory] : ranks_) {
    if (key.role != role) continue;
    for (const std::shared_ptr<const QuantizedView>& view : memory.quantized) {
      views.push_back(view.get());
      bytes += view->SourceBytes();
    }
  }
  if (absl::Status done = QuantizeViews(views, threads); !done.ok()) return done;
  return bytes;
}

int64_t BufferMap::QuantizedBytes(v1::Role role) const {
  int64_t bytes = 0;
  for (const auto& [key, memory] : ranks_) {
    if (key.role != role) continue;
    for (const std::shared_ptr<const QuantizedView>& view : memory.quantized)
      bytes += view->bytes();
  }
  return bytes;
}

void BufferMap::StageEpoch(const std::set<int64_t>& planned_destinations) {
  for (auto& [key, memory] : ranks_) {
    memory.written_by_epoch = !memory.shadows.empty() && key.role == v1::ROLE_DESTINATION &&
                              planned_destinations.count(key.rank) > 0;
  }
}

std::map<int64_t, absl::Status> BufferMap::CommitStaged() {
  std::map<int64_t, absl::Status> torn;
  for (auto& [key, memory] : ranks_) {
    if (!memory.written_by_epoch) continue;
    memory.written_by_epoch = false;
    // A buffer its owner shrank since the epoch began is left alone (it cannot be written
    // without faulting), as is the rest of a rank whose copy faulted midway.
    absl::Status backed = absl::OkStatus();
    for (const auto& segment : memory.segments) {
      if (backed.ok()) backed = segment->CheckBacked();
    }
    // As registered: a view quantized on arrival is committed as its codes.
    const std::vector<MappedView>& views =
        memory.registered_views.empty() ? memory.views : memory.registered_views;
    for (size_t i = 0; i < views.size() && backed.ok(); ++i) {
      const MappedView& view = views[i];
      backed = GuardMemoryAccess(
          absl::StrCat("committing view ", i, " of destination rank ", key.rank), [&] {
            CopyBox(view.extent, view.element_bytes, StridedRef{view.base, view.strides},
                    StridedRef{memory.committed_bases[i], view.strides});
          });
    }
    if (!backed.ok()) torn.emplace(key.rank, backed);
  }
  return torn;
}

void BufferMap::DiscardStaged() {
  for (auto& [key, memory] : ranks_) memory.written_by_epoch = false;
}

bool BufferMap::IsStaged(v1::Role role, int64_t rank) const {
  auto it = ranks_.find({role, rank});
  return it != ranks_.end() && !it->second.shadows.empty();
}

int64_t BufferMap::ShadowBytes() const {
  int64_t bytes = 0;
  for (const auto& [key, memory] : ranks_) {
    for (const auto& shadow : memory.shadows) bytes += shadow->bytes();
  }
  return bytes;
}

absl::StatusOr<ConstStridedRef> BufferMap::Locate(v1::Role role, int64_t rank, int32_t view,
                                                  const std::string& tensor, const Dims& offset,
                                                  const Dims& extent) const {
  absl::StatusOr<StridedRef> found = Find(role, rank, view, tensor, offset, extent);
  if (!found.ok()) return found.status();
  return ConstStridedRef(*found);
}

absl::StatusOr<StridedRef> BufferMap::LocateForWrite(v1::Role role, int64_t rank, int32_t view,
                                                     const std::string& tensor, const Dims& offset,
                                                     const Dims& extent) {
  // A destination view quantized on arrival is written wide (then quantized by the map).
  return Find(role, rank, view, tensor, offset, extent,
              /*as_registered=*/role == v1::ROLE_SOURCE);
}

absl::StatusOr<ConstStridedRef> BufferMap::LocateAsRegistered(v1::Role role, int64_t rank,
                                                              int32_t view,
                                                              const std::string& tensor,
                                                              const Dims& offset,
                                                              const Dims& extent) const {
  absl::StatusOr<StridedRef> found =
      Find(role, rank, view, tensor, offset, extent, /*as_registered=*/true);
  if (!found.ok()) return found.status();
  return ConstStridedRef(*found);
}

absl::StatusOr<StridedRef> BufferMap::Find(v1::Role role, int64_t rank, int32_t view,
                                           const std::string& tensor, const Dims& offset,
                                           const Dims& extent, bool as_registered) const {
  auto it = ranks_.find({role, rank});
  if (it == ranks_.end()) {
    return absl::NotFoundError(absl::StrCat(RankName(role, rank), " is not registered here"));
  }
  const std::vector<MappedView>& views = as_registered && !it->second.registered_views.empty()
                                             ? it->second.registered_views
                                             : it->second.views;
  if (view < 0 || view >= static_cast<int32_t>(views.size())) {
    return absl::NotFoundError(absl::StrCat(RankName(role, rank), " has no view ", view));
  }
  const MappedView& v = views[view];
  if (v.tensor != tensor || offset.size() != v.offset.size() || extent.size() != v.offset.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(RankName(role, rank), ": view ", view, " holds ", v.tensor, ", not ", tensor));
  }
  for (size_t d = 0; d < offset.size(); ++d) {
    if (offset[d] < v.offset[d] || offset[d] + extent[d] > v.offset[d] + v.extent[d]) {
      return absl::OutOfRangeError(
          absl::StrCat(RankName(role, rank), ": ", tensor, " box leaves view ", view));
    }
  }
  if (it->second.bucketed) {
    return absl::FailedPreconditionError(
        absl::StrCat(RankName(role, rank), " receives its weights in buckets: view ", view, " (",
                     tensor, ") has no memory here to read or write"));
  }
  int64_t element = 0;
  for (size_t d = 0; d < offset.size(); ++d) element += (offset[d] - v.offset[d]) * v.strides[d];
  return StridedRef{v.base + element * v.element_bytes, v.strides, v.device};
}

absl::Status BufferMap::CheckBucketedBox(int64_t rank, int32_t view, const std::string& tensor,
                                         const Dims& offset, const Dims& extent) const {
  absl::StatusOr<ConstStridedRef> located =
      Locate(v1::ROLE_DESTINATION, rank, view, tensor, offset, extent);
  if (located.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(RankName(v1::ROLE_DESTINATION, rank), " is not bucketed"));
  }
  return IsBucketed(rank) && located.status().code() == absl::StatusCode::kFailedPrecondition
             ? absl::OkStatus()
             : located.status();
}

bool BufferMap::IsBucketed(int64_t rank) const {
  auto it = ranks_.find({v1::ROLE_DESTINATION, rank});
  return it != ranks_.end() && it->second.bucketed;
}

absl::StatusOr<MappedBuffer*> BufferMap::BucketOf(int64_t rank) {
  auto it = ranks_.find({v1::ROLE_DESTINATION, rank});
  if (it == ranks_.end() || !it->second.bucketed) {
    return absl::NotFoundError(
        absl::StrCat(RankName(v1::ROLE_DESTINATION, rank), " is not a bucketed rank here"));
  }
  return it->second.segments.front().get();
}

}  // namespace refit::transport

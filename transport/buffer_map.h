// The memory of the ranks one refitd serves: each registered rank's buffers (mapped
// shared-memory segments, or GPU memory opened from CUDA IPC handles, kept open until the
// rank leaves) and its views inside them, bounds-checked at registration so that no
// transfer can read or write outside a buffer. Through a const map the memory can only be
// read: writable refs come from a non-const map (the epoch's BufferHold hands one out).
//
// Threading: not locked. refitd's RankRegistry changes it under its own mutex, and the
// epoch thread (with its copy and quantization threads) reads it only while a BufferHold
// keeps it from changing.
#ifndef REFIT_TRANSPORT_BUFFER_MAP_H_
#define REFIT_TRANSPORT_BUFFER_MAP_H_

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "proto/refit.pb.h"
#include "transport/rank_key.h"
#include "transport/shared_memory.h"
#include "transport/strided_copy.h"

namespace refit::transport {

struct TensorShape {
  int element_bytes = 0;
  Dims shape;
};
// Tensor name -> element size and global shape, as the layouts declare them.
using TensorTable = absl::flat_hash_map<std::string, TensorShape>;
// The tensors `spec` declares; an error names a tensor of unknown dtype.
absl::StatusOr<TensorTable> TensorTableOf(const v1::LayoutSpec& spec);

// One view of a registered rank, resolved to memory.
struct MappedView {
  std::string tensor;
  Dims offset;
  Dims extent;
  Dims strides;  // elements
  int element_bytes = 0;
  uint8_t* base = nullptr;  // the view's first element
  int32_t device = -1;      // CUDA device of the buffer; -1: host memory
};

class QuantizedView;

class BufferMap {
 public:
  explicit BufferMap(TensorTable tensors = {}) : declared_{tensors, tensors}, tensors_(tensors) {
    for (const auto& [name, shape] : tensors_) pinned_tensors_.insert(name);
  }

  // Adds a tensor to what ranks of `role` declare, or checks an existing one has the same
  // element size and shape. The two sides declare apart: a trainer's BF16 weight and an
  // inference rank's FP8 codes of it may be served by one daemon.
  absl::Status DeclareTensor(v1::Role role, const std::string& name, const TensorShape& shape);

  // Maps the rank's buffers (shared-memory segments by name, GPU allocations by CUDA IPC
  // handle; a bucketed rank's one bucket) and checks each view fits its buffer. Errors name the
  // rank, view and buffer. `rank_tensors`, when given, are the tensors the rank declares: each must
  // agree with a tensor already declared, and is forgotten once no rank that declared it is left
  // (tensors given to the constructor are never forgotten). Nothing is kept when it fails.
  absl::Status AddRank(v1::Role role, const v1::RankLayout& layout,
                       const TensorTable* rank_tensors = nullptr);
  // A rank's memory opened ahead of AddRank: its buffers mapped and, for a staged rank, its
  // shadows allocated. Mapping a segment of tens of GB populates its pages, which takes
  // seconds: OpenRank needs no map, so a registry opens a rank's memory outside its lock
  // and adds the rank under it with what was opened. Closed when dropped.
  struct OpenedRank {
    std::vector<std::unique_ptr<MappedBuffer>> segments;  // one per buffer, in order
    std::vector<std::string> segment_names;
    std::vector<std::unique_ptr<MappedBuffer>> shadows;  // staged ranks: one per segment
  };
  // AddRank's checks of the buffers themselves (bucketed and staged ranks' rules, a name or
  // a CUDA IPC handle each), and the mapping; errors name the rank and buffer.
  static absl::StatusOr<OpenedRank> OpenRank(v1::Role role, const v1::RankLayout& layout);
  // AddRank with the rank's memory opened by OpenRank(role, layout).
  absl::Status AddRank(v1::Role role, const v1::RankLayout& layout, const TensorTable* rank_tensors,
                       OpenedRank opened);
  void RemoveRank(v1::Role role, int64_t rank);

  // Memory of the box [offset, offset + extent) of view `view` of a rank, to read; an error
  // when the rank or view is unknown, the tensor differs, or the box leaves the view. A
  // const map only reads.
  absl::StatusOr<ConstStridedRef> Locate(v1::Role role, int64_t rank, int32_t view,
                                         const std::string& tensor, const Dims& offset,
                                         const Dims& extent) const;
  // The same box, to write (the data plane's destinations, test fills). A source view sent
  // quantized is written as registered, in its own dtype (what its trainer writes); Locate
  // reads it as sent. A destination view quantized on arrival is read and written wide (as
  // the plan moves it) by both.
  absl::StatusOr<StridedRef> LocateForWrite(v1::Role role, int64_t rank, int32_t view,
                                            const std::string& tensor, const Dims& offset,
                                            const Dims& extent);

  // The box as the rank registered it (codes of a view quantized on arrival, a source's
  // own dtype where it is sent quantized), to read.
  absl::StatusOr<ConstStridedRef> LocateAsRegistered(v1::Role role, int64_t rank, int32_t view,
                                                     const std::string& tensor, const Dims& offset,
                                                     const Dims& extent) const;

  // The tensors as the data plane moves them: as the destinations declare them, else as the
  // sources do, except those sent quantized (SendQuantized): their codes take 1 byte, and
  // their scale tensors are F32.
  const TensorTable& tensors() const { return tensors_; }

  // Source views sent quantized (the slice's list, planner/quantization.h): from now on each
  // listed view of a source rank mapped here is read as its E4M3 codes (a cast: its BF16
  // values) and view `scale_view` of the rank as its blocks' scales, both in memory this map keeps
  // (until the rank leaves or another list comes; an equal list keeps it). Entries of ranks not
  // mapped here are skipped. An error names the rank and view (nothing is changed for that rank).
  absl::Status SendQuantized(const std::vector<v1::QuantizedSource>& views);
  // Destination views quantized on arrival (PlanSlice.quantized_on_arrival): from now on the
  // data plane writes (and reads) each listed view of a destination rank mapped here in the
  // sources' dtype, in memory this map keeps, until QuantizeReceived writes the rank's codes
  // and scales; tensors() gives such a tensor in the sources' dtype. A GPU view is kept and
  // quantized on its GPU; bucketed ranks are refused naming the rank and view. As
  // SendQuantized otherwise.
  absl::Status ReceiveQuantized(const std::vector<v1::QuantizedSource>& views);
  // Quantizes every view sent quantized from its rank's memory, on up to `threads` threads:
  // before an epoch moves them. The bytes read (of the ranks' memory).
  absl::StatusOr<int64_t> QuantizeSent(int threads);
  // Quantizes every view received wide into its rank's codes and scales (a staged rank's
  // shadow): after the data plane, before the epoch is done. The bytes read.
  absl::StatusOr<int64_t> QuantizeReceived(int threads);
  // Memory kept for the views of `role`'s ranks (codes and scales sent; the wide copies
  // received), and how many views' worth were allocated so far.
  int64_t QuantizedBytes(v1::Role role) const;
  int64_t QuantizedAllocations(v1::Role role) const { return quantized_allocations_[SideOf(role)]; }

  // Bucketed destination ranks (RankLayout.bucketed): their views have no memory here
  // (Locate says FAILED_PRECONDITION), and their one buffer is the staging bucket.
  // A bucket is two halves of whole 64-byte-aligned parts: at least this large.
  static constexpr int64_t kMinBucketBytes = 256;
  bool IsBucketed(int64_t rank) const;
  // The rank's bucket, which the data plane writes.
  absl::StatusOr<MappedBuffer*> BucketOf(int64_t rank);
  // OK when the box is inside view `view` of bucketed destination rank `rank`.
  absl::Status CheckBucketedBox(int64_t rank, int32_t view, const std::string& tensor,
                                const Dims& offset, const Dims& extent) const;

  // OK while every mapped buffer is still fully backed; else FAILED_PRECONDITION naming
  // the rank, the buffer and what changed (a segment truncated by its owner). Checked at
  // the start of each epoch, before the data plane touches anything.
  absl::Status CheckBacked() const;
  // Whether the rank is mapped and each of its buffers is still what its name leads to (a
  // rank registered again under the same segment names has new memory behind them).
  bool StillNamed(v1::Role role, int64_t rank) const;

  // Staged destination ranks (RankLayout.staged): the views point into shadow copies of
  // the buffers, which the data plane writes. StageEpoch marks the staged destination
  // ranks mapped now that the epoch about to run writes (`planned_destinations`);
  // CommitStaged copies those ranks' views from the shadows into their buffers and returns
  // the ranks it could not copy whole (a segment truncated by its owner), with why;
  // DiscardStaged forgets them (the epoch failed: the buffers keep what they held). A rank
  // registered after StageEpoch, or not in the plan, is left alone.
  void StageEpoch(const std::set<int64_t>& planned_destinations);
  std::map<int64_t, absl::Status> CommitStaged();
  void DiscardStaged();
  // Whether the rank is mapped and staged.
  bool IsStaged(v1::Role role, int64_t rank) const;
  // Host memory the shadows take.
  int64_t ShadowBytes() const;

 private:
  // Locate (as the plan moves them) and LocateAsRegistered.
  absl::StatusOr<StridedRef> Find(v1::Role role, int64_t rank, int32_t view,
                                  const std::string& tensor, const Dims& offset, const Dims& extent,
                                  bool as_registered = false) const;
  // AddRank's view checks with the tensor table as it is, over the rank's opened memory.
  absl::Status MapRank(v1::Role role, const v1::RankLayout& layout, OpenedRank opened);
  // tensors() again after the declared tensors or the views sent quantized changed.
  void RefreshTensors();
  struct RankMemory;
  // SendQuantized (sources) and ReceiveQuantized (destinations).
  absl::Status UseQuantized(v1::Role role, const std::vector<v1::QuantizedSource>& views);
  // A rank's views as the plan moves them once `wanted` is quantized (its QuantizedViews
  // added to `quantized`).
  absl::StatusOr<std::vector<MappedView>> QuantizedViewsOf(
      const RankKey& key, const RankMemory& memory,
      const std::vector<const v1::QuantizedSource*>& wanted,
      std::vector<std::shared_ptr<const QuantizedView>>* quantized);
  absl::StatusOr<int64_t> QuantizeOf(v1::Role role, int threads);
  static int SideOf(v1::Role role) { return role == v1::ROLE_DESTINATION ? 1 : 0; }

  struct RankMemory {
    std::vector<std::unique_ptr<MappedBuffer>> segments;
    std::vector<std::string> segment_names;  // the buffers' names, as registered
    std::vector<MappedView> views;
    // Staged ranks: one shadow per segment, and per view its first element in the
    // rank's own buffer (views[i].base is in the shadow).
    std::vector<std::unique_ptr<MappedBuffer>> shadows;
    std::vector<uint8_t*> committed_bases;
    bool written_by_epoch = false;
    bool bucketed = false;  // segments[0] is the staging bucket; views have no memory
    std::vector<std::string> declared_tensors;  // counted in tensor_users_
    // Sent quantized (SendQuantized) or quantized on arrival (ReceiveQuantized): the views
    // as registered (`views` holds them as the plan moves them), and each quantized view.
    std::vector<MappedView> registered_views;
    std::vector<std::shared_ptr<const QuantizedView>> quantized;  // shared: declared here only
  };

  TensorTable declared_[2];  // by SideOf(role)
  TensorTable tensors_;      // what tensors() gives
  // The constructor's tensors: never forgotten.
  absl::flat_hash_set<std::string> pinned_tensors_;
  // Per tensor declared by ranks, how many mapped ranks declared it.
  absl::flat_hash_map<std::string, int> tensor_users_[2];
  std::map<RankKey, RankMemory> ranks_;
  int64_t quantized_allocations_[2] = {0, 0};  // by SideOf(role)
};

}  // namespace refit::transport

#endif  // REFIT_TRANSPORT_BUFFER_MAP_H_

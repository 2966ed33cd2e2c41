// Copies a box of elements between two strided memory regions, as few contiguous runs as
// the strides allow (dims that are contiguous on both sides are merged; a contiguous inner
// run is one memcpy). Packing into and unpacking from a dense staging buffer are the same
// copy with row-major strides on one side.
#ifndef REFIT_TRANSPORT_STRIDED_COPY_H_
#define REFIT_TRANSPORT_STRIDED_COPY_H_

#include <cstdint>
#include <functional>
#include <utility>

#include "absl/container/inlined_vector.h"

namespace refit::transport {

using Dims = absl::InlinedVector<int64_t, 4>;

// The first element of a box in memory that may be written, and the element strides of
// its dims.
struct StridedRef {
  uint8_t* base = nullptr;
  Dims strides;
  int32_t device = -1;  // the CUDA device holding the memory; -1: host memory
};

// The same for memory that is only read (what a const BufferMap hands out). Every
// StridedRef is one.
struct ConstStridedRef {
  const uint8_t* base = nullptr;
  Dims strides;
  int32_t device = -1;

  ConstStridedRef() = default;
  ConstStridedRef(const uint8_t* base, Dims strides, int32_t device = -1)
      : base(base), strides(std::move(strides)), device(device) {}
  ConstStridedRef(const StridedRef& ref)  // NOLINT(google-explicit-constructor): read access
      : base(ref.base), strides(ref.strides), device(ref.device) {}
};

// A box copy after merging every dim into the one inside it where both sides are
// contiguous across the boundary; dims of one element are dropped (at least one dim stays).
struct Collapsed {
  Dims extent, src, dst;
};
Collapsed Collapse(const Dims& extent, const Dims& src_strides, const Dims& dst_strides);

// Element strides of a dense row-major array of `extent`.
Dims RowMajorStrides(const Dims& extent);

// Whether a box of `extent` holds no element (an extent of 0 somewhere: a trailing
// torch.chunk shard); such a box is copied, hashed and bounds-checked as nothing.
bool HoldsNothing(const Dims& extent);

// Copies `extent` elements of `element_bytes` from `src` to `dst`.
void CopyBox(const Dims& extent, int element_bytes, const ConstStridedRef& src,
             const StridedRef& dst);

// The same copy, hashing on the way: each given hash (null: not wanted) is set to HashBox
// of the bytes copied, hashed once, slice by slice as they are read (still in cache). Both
// ends get the same hash: in one process the bytes written are the bytes read, and hashing
// the destination again (read back from the cache right after the write) checked memcpy
// against itself for a second pass over every byte. What a copy cannot vouch for (bytes
// that crossed a transport, a destination read again later) is checked where it is read.
void CopyBox(const Dims& extent, int element_bytes, const ConstStridedRef& src,
             const StridedRef& dst, uint64_t* source_hash, uint64_t* destination_hash);

// Number of contiguous runs CopyBox issues for these strides (1 for dense boxes).
int64_t CountRuns(const Dims& extent, const Dims& src_strides, const Dims& dst_strides);

// Calls `visit(data, bytes)` for the box's elements in row-major order, as few contiguous
// runs as its strides allow.
void ForEachRun(const Dims& extent, int element_bytes, const ConstStridedRef& box,
                const std::function<void(const uint8_t* data, int64_t bytes)>& visit);

// XXH3-64 of the box's elements in row-major order: equal boxes hash equal whatever their
// memory layout.
uint64_t HashBox(const Dims& extent, int element_bytes, const ConstStridedRef& box);

}  // namespace refit::transport

#endif  // REFIT_TRANSPORT_STRIDED_COPY_H_

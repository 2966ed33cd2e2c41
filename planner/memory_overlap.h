// Decides whether two strided views in one buffer can share a byte. Used by layout
// validation to reject views that overlap in memory (fused buffers must tile, not alias).
#ifndef REFIT_PLANNER_MEMORY_OVERLAP_H_
#define REFIT_PLANNER_MEMORY_OVERLAP_H_

#include <cstdint>

#include "planner/box.h"

namespace refit::planner {

struct StridedRegion {
  int64_t byte_offset = 0;
  Dims extent;
  Dims strides;  // elements
  int element_bytes = 1;
};

// [first byte, one past last byte) touched by the region.
int64_t RegionBeginByte(const StridedRegion& region);
int64_t RegionEndByte(const StridedRegion& region);

// True when the strides let two distinct elements share memory.
bool StridesAlias(const Dims& extent, const Dims& strides);

// Conservative: true unless the two regions are proven disjoint (disjoint byte spans, or
// equal strides placing both as disjoint boxes of one dense frame).
bool MayOverlap(const StridedRegion& a, const StridedRegion& b);

}  // namespace refit::planner

#endif  // REFIT_PLANNER_MEMORY_OVERLAP_H_

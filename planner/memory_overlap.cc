#include "planner/memory_overlap.h"

#include <algorithm>
#include <numeric>
#include <vector>

namespace refit::planner {
namespace {

// Dims ordered by stride, largest first.
std::vector<size_t> DimsByStrideDescending(const Dims& strides) {
  std::vector<size_t> order(strides.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return strides[a] > strides[b]; });
  return order;
}

// Coordinates of `element_offset` in the mixed-radix frame the strides define, when the
// region is a box of that frame (every coordinate + extent stays below the next radix).
bool FrameBox(const StridedRegion& region, int64_t element_offset, Box* box) {
  const std::vector<size_t> order = DimsByStrideDescending(region.strides);
  box->offset.assign(region.strides.size(), 0);
  box->extent = region.extent;
  int64_t rest = element_offset;
  for (size_t i = 0; i < order.size(); ++i) {
    const size_t d = order[i];
    const int64_t stride = region.strides[d];
    box->offset[d] = rest / stride;
    rest %= stride;
    if (i > 0) {
      const int64_t radix = region.strides[order[i - 1]] / stride;
      if (box->offset[d] + region.extent[d] > radix) return false;
    }
  }
  return rest == 0;
}

}  // namespace

int64_t RegionBeginByte(const StridedRegion& region) { return region.byte_offset; }

int64_t RegionEndByte(const StridedRegion& region) {
  int64_t last = 0;
  for (size_t d = 0; d < region.extent.size(); ++d) {
    last += (region.extent[d] - 1) * region.strides[d];
  }
  return region.byte_offset + (last + 1) * region.element_bytes;
}

bool StridesAlias(const Dims& extent, const Dims& strides) {
  std::vector<size_t> order = DimsByStrideDescending(strides);
  std::reverse(order.begin(), order.end());  // smallest stride first
  int64_t span = 1;                          // elements covered by the dims seen so far
  for (size_t d : order) {
    if (extent[d] == 1) continue;
    if (strides[d] <= 0 || strides[d] < span) return true;
    span = strides[d] * extent[d];
  }
  return false;
}

bool MayOverlap(const StridedRegion& a, const StridedRegion& b) {
  if (RegionEndByte(a) <= RegionBeginByte(b) || RegionEndByte(b) <= RegionBeginByte(a)) {
    return false;
  }
  if (a.strides != b.strides || a.element_bytes != b.element_bytes) return true;
  const int64_t base = std::min(a.byte_offset, b.byte_offset);
  if ((a.byte_offset - base) % a.element_bytes != 0 ||
      (b.byte_offset - base) % a.element_bytes != 0) {
    return true;
  }
  Box box_a, box_b;
  if (!FrameBox(a, (a.byte_offset - base) / a.element_bytes, &box_a)) return true;
  if (!FrameBox(b, (b.byte_offset - base) / b.element_bytes, &box_b)) return true;
  return Overlaps(box_a, box_b);
}

}  // namespace refit::planner

// N-dimensional boxes of a global tensor: [offset, offset + extent) along every dim.
// The planner's geometry (intersection, difference, splitting) lives here.
#ifndef REFIT_PLANNER_BOX_H_
#define REFIT_PLANNER_BOX_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"

namespace refit::planner {

using Dims = absl::InlinedVector<int64_t, 4>;

struct Box {
  Dims offset;
  Dims extent;

  size_t rank() const { return offset.size(); }
  int64_t Volume() const;
  bool Empty() const;
  bool operator==(const Box& other) const {
    return offset == other.offset && extent == other.extent;
  }
  bool operator!=(const Box& other) const { return !(*this == other); }
  // Lexicographic on (offset, extent): the deterministic order used everywhere.
  bool operator<(const Box& other) const;
};

// "[0:16, 64:128]" (start:end per dim).
std::string FormatBox(const Box& box);

bool Overlaps(const Box& a, const Box& b);
// True when `outer` contains `inner` entirely.
bool Contains(const Box& outer, const Box& inner);
// The common part of a and b; an empty box (volume 0) when they do not overlap.
Box Intersect(const Box& a, const Box& b);
// Appends a minus b as at most 2 * rank disjoint boxes.
void Subtract(const Box& a, const Box& b, std::vector<Box>* out);
// When a and b differ only along one dim and touch there, their union as one box.
bool TryMerge(const Box& a, const Box& b, Box* merged);
// Cuts `box` into `parts` nearly equal slabs along `dim` (torch.chunk style).
std::vector<Box> SplitAlong(const Box& box, size_t dim, int64_t parts);
// The box of block indices covering `box` in blocks of `block` (per dim): offset / block,
// the end rounded up (block-scaled quantization: the scales of a box's blocks).
Box BlocksOf(const Box& box, const Dims& block);
// The block grid of a whole tensor of `shape`: ceil(shape / block) per dim.
Dims BlockGrid(const Dims& shape, const Dims& block);
// Bytes of a box whose elements take `element_bytes`.
inline int64_t BoxBytes(const Box& box, int element_bytes) { return box.Volume() * element_bytes; }

}  // namespace refit::planner

#endif  // REFIT_PLANNER_BOX_H_

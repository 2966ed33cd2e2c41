#include "planner/box.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace refit::planner {

int64_t Box::Volume() const {
  int64_t volume = 1;
  for (int64_t e : extent) volume *= e;
  return volume;
}

bool Box::Empty() const {
  for (int64_t e : extent) {
    if (e <= 0) return true;
  }
  return false;
}

bool Box::operator<(const Box& other) const {
  if (offset != other.offset) {
    return std::lexicographical_compare(offset.begin(), offset.end(), other.offset.begin(),
                                        other.offset.end());
  }
  return std::lexicographical_compare(extent.begin(), extent.end(), other.extent.begin(),
                                      other.extent.end());
}

std::string FormatBox(const Box& box) {
  std::string out = "[";
  for (size_t d = 0; d < box.rank(); ++d) {
    if (d > 0) out += ", ";
    absl::StrAppend(&out, box.offset[d], ":", box.offset[d] + box.extent[d]);
  }
  out += "]";
  return out;
}

bool Overlaps(const Box& a, const Box& b) {
  for (size_t d = 0; d < a.rank(); ++d) {
    if (a.offset[d] >= b.offset[d] + b.extent[d]) return false;
    if (b.offset[d] >= a.offset[d] + a.extent[d]) return false;
  }
  return true;
}

bool Contains(const Box& outer, const Box& inner) {
  for (size_t d = 0; d < outer.rank(); ++d) {
    if (inner.offset[d] < outer.offset[d]) return false;
    if (inner.offset[d] + inner.extent[d] > outer.offset[d] + outer.extent[d]) return false;
  }
  return true;
}

Box Intersect(const Box& a, const Box& b) {
  Box out;
  out.offset.resize(a.rank());
  out.extent.resize(a.rank());
  for (size_t d = 0; d < a.rank(); ++d) {
    const int64_t lo = std::max(a.offset[d], b.offset[d]);
    const int64_t hi = std::min(a.offset[d] + a.extent[d], b.offset[d] + b.extent[d]);
    out.offset[d] = lo;
    out.extent[d] = std::max<int64_t>(0, hi - lo);
  }
  return out;
}

void Subtract(const Box& a, const Box& b, std::vector<Box>* out) {
  if (!Overlaps(a, b)) {
    out->push_back(a);
    return;
  }
  Box rest = a;
  for (size_t d = 0; d < a.rank(); ++d) {
    const int64_t lo = std::max(rest.offset[d], b.offset[d]);
    const int64_t hi = std::min(rest.offset[d] + rest.extent[d], b.offset[d] + b.extent[d]);
    if (lo > rest.offset[d]) {
      Box below = rest;
      below.extent[d] = lo - rest.offset[d];
      out->push_back(below);
    }
    if (hi < rest.offset[d] + rest.extent[d]) {
      Box above = rest;
      above.offset[d] = hi;
      above.extent[d] = rest.offset[d] + rest.extent[d] - hi;
      out->push_back(above);
    }
    rest.offset[d] = lo;
    rest.extent[d] = hi - lo;
  }
}

bool TryMerge(const Box& a, const Box& b, Box* merged) {
  int differing = -1;
  for (size_t d = 0; d < a.rank(); ++d) {
    if (a.offset[d] == b.offset[d] && a.extent[d] == b.extent[d]) continue;
    if (differing >= 0) return false;
    differing = static_cast<int>(d);
  }
  if (differing < 0) return false;
  const size_t d = differing;
  const Box& first = a.offset[d] < b.offset[d] ? a : b;
  const Box& second = a.offset[d] < b.offset[d] ? b : a;
  if (first.offset[d] + first.extent[d] != second.offset[d]) return false;
  *merged = first;
  merged->extent[d] = first.extent[d] + second.extent[d];
  return true;
}

std::vector<Box> SplitAlong(const Box& box, size_t dim, int64_t parts) {
  std::vector<Box> out;
  const int64_t n = box.extent[dim];
  parts = std::max<int64_t>(1, std::min(parts, n));
  const int64_t chunk = (n + parts - 1) / parts;
  for (int64_t start = 0; start < n; start += chunk) {
    Box part = box;
    part.offset[dim] = box.offset[dim] + start;
    part.extent[dim] = std::min(chunk, n - start);
    out.push_back(part);
  }
  return out;
}

Box BlocksOf(const Box& box, const Dims& block) {
  Box blocks;
  for (size_t d = 0; d < box.rank(); ++d) {
    const int64_t begin = box.offset[d] / block[d];
    const int64_t end = (box.offset[d] + box.extent[d] + block[d] - 1) / block[d];
    blocks.offset.push_back(begin);
    blocks.extent.push_back(end - begin);
  }
  return blocks;
}

Dims BlockGrid(const Dims& shape, const Dims& block) {
  return BlocksOf(Box{Dims(shape.size(), 0), shape}, block).extent;
}

}  // namespace refit::planner

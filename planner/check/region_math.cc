#include "planner/check/region_math.h"

#include <algorithm>

namespace refit::check {
namespace {

// Appends the parts of `r` outside `cut` (slab by slab, one dim at a time).
void CarveOut(Region r, const Region& cut, std::vector<Region>* out) {
  if (AreDisjoint(r, cut)) {
    out->push_back(r);
    return;
  }
  for (size_t d = 0; d < r.lo.size(); ++d) {
    if (r.lo[d] < cut.lo[d]) {
      Region slab = r;
      slab.hi[d] = cut.lo[d];
      out->push_back(slab);
      r.lo[d] = cut.lo[d];
    }
    if (r.hi[d] > cut.hi[d]) {
      Region slab = r;
      slab.lo[d] = cut.hi[d];
      out->push_back(slab);
      r.hi[d] = cut.hi[d];
    }
  }
}

}  // namespace

Region RegionFrom(const int64_t* offset, const int64_t* extent, size_t rank) {
  Region r;
  for (size_t d = 0; d < rank; ++d) {
    r.lo.push_back(offset[d]);
    r.hi.push_back(offset[d] + extent[d]);
  }
  return r;
}

int64_t Cells(const Region& r) {
  int64_t n = 1;
  for (size_t d = 0; d < r.lo.size(); ++d) n *= std::max<int64_t>(0, r.hi[d] - r.lo[d]);
  return n;
}

bool IsInside(const Region& inner, const Region& outer) {
  if (inner.lo.size() != outer.lo.size()) return false;
  for (size_t d = 0; d < inner.lo.size(); ++d) {
    if (inner.lo[d] < outer.lo[d] || inner.hi[d] > outer.hi[d]) return false;
  }
  return true;
}

bool AreDisjoint(const Region& a, const Region& b) {
  for (size_t d = 0; d < a.lo.size(); ++d) {
    if (a.hi[d] <= b.lo[d] || b.hi[d] <= a.lo[d]) return true;
  }
  return false;
}

bool IsCoveredBy(const Region& r, const std::vector<Region>& cover) {
  std::vector<Region> left = {r}, next;
  for (const Region& c : cover) {
    next.clear();
    for (const Region& part : left) CarveOut(part, c, &next);
    left.swap(next);
    if (left.empty()) return true;
  }
  return left.empty();
}

std::string Describe(const Region& r) {
  std::string s = "[";
  for (size_t d = 0; d < r.lo.size(); ++d) {
    if (d > 0) s += ", ";
    s += std::to_string(r.lo[d]) + ":" + std::to_string(r.hi[d]);
  }
  return s + "]";
}

}  // namespace refit::check

// Box arithmetic for the plan checkers, written apart from the planner's own geometry on
// purpose: a checker that shared the planner's intersection code would share its bugs.
#ifndef REFIT_PLANNER_CHECK_REGION_MATH_H_
#define REFIT_PLANNER_CHECK_REGION_MATH_H_

#include <cstdint>
#include <string>
#include <vector>

namespace refit::check {

// Half-open box: lo[d] <= x[d] < hi[d].
struct Region {
  std::vector<int64_t> lo;
  std::vector<int64_t> hi;
};

Region RegionFrom(const int64_t* offset, const int64_t* extent, size_t rank);
int64_t Cells(const Region& r);
bool IsInside(const Region& inner, const Region& outer);
bool AreDisjoint(const Region& a, const Region& b);
// True when `r` lies inside the union of `cover`.
bool IsCoveredBy(const Region& r, const std::vector<Region>& cover);
std::string Describe(const Region& r);

}  // namespace refit::check

#endif  // REFIT_PLANNER_CHECK_REGION_MATH_H_

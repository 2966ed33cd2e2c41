// Finds, for a query box, the source groups of one tensor that overlap it. Groups are
// sorted by start along the tensor's most-split dim with a running maximum of their ends,
// so a query costs O(log n + boxes in the query's slab), never a scan of every source.
#ifndef REFIT_PLANNER_OVERLAP_INDEX_H_
#define REFIT_PLANNER_OVERLAP_INDEX_H_

#include <cstdint>
#include <vector>

#include "planner/box.h"
#include "planner/source_groups.h"

namespace refit::planner {

class OverlapIndex {
 public:
  // `groups` must outlive the index; indexes every group of every tensor.
  OverlapIndex(const std::vector<ViewGroup>& groups, int32_t num_tensors);

  // Appends the indices (into groups) of the groups of `tensor` overlapping `box`,
  // in ascending (box) order.
  void Query(int32_t tensor, const Box& box, std::vector<int32_t>* out) const;

 private:
  struct TensorIndex {
    size_t dim = 0;
    std::vector<int32_t> by_start;     // group indices sorted by offset[dim]
    std::vector<int64_t> running_end;  // max end over by_start[0..i]
  };
  const std::vector<ViewGroup>& groups_;
  std::vector<TensorIndex> tensors_;
};

}  // namespace refit::planner

#endif  // REFIT_PLANNER_OVERLAP_INDEX_H_

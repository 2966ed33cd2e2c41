// Views of one side grouped by (tensor, box): replicas of the same box form one group.
// Sources and destinations are both grouped so every distinct box is planned once.
#ifndef REFIT_PLANNER_SOURCE_GROUPS_H_
#define REFIT_PLANNER_SOURCE_GROUPS_H_

#include <cstdint>
#include <vector>

#include "planner/box.h"
#include "planner/layout.h"

namespace refit::planner {

struct ViewGroup {
  int32_t tensor = 0;
  Box box;
  std::vector<int32_t> views;  // into Layout::views, ascending
};

// Groups of `layout`, ordered by (tensor, box); `tensor_map` renames the layout's tensor
// indices (e.g. source tensor -> destination tensor; -1 drops the view).
std::vector<ViewGroup> GroupViews(const Layout& layout, const std::vector<int32_t>& tensor_map);

}  // namespace refit::planner

#endif  // REFIT_PLANNER_SOURCE_GROUPS_H_

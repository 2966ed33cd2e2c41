#include "planner/source_groups.h"

#include <algorithm>
#include <numeric>

namespace refit::planner {

std::vector<ViewGroup> GroupViews(const Layout& layout, const std::vector<int32_t>& tensor_map) {
  std::vector<int32_t> order;
  order.reserve(layout.views.size());
  for (int32_t v = 0; v < static_cast<int32_t>(layout.views.size()); ++v) {
    if (tensor_map[layout.views[v].tensor] >= 0) order.push_back(v);
  }
  auto key_less = [&](int32_t a, int32_t b) {
    const ViewInfo& va = layout.views[a];
    const ViewInfo& vb = layout.views[b];
    const int32_t ta = tensor_map[va.tensor], tb = tensor_map[vb.tensor];
    if (ta != tb) return ta < tb;
    if (va.box != vb.box) return va.box < vb.box;
    return a < b;
  };
  std::sort(order.begin(), order.end(), key_less);
  std::vector<ViewGroup> groups;
  for (int32_t v : order) {
    const ViewInfo& view = layout.views[v];
    const int32_t tensor = tensor_map[view.tensor];
    if (groups.empty() || groups.back().tensor != tensor || groups.back().box != view.box) {
      groups.push_back(ViewGroup{tensor, view.box, {}});
    }
    groups.back().views.push_back(v);
  }
  return groups;
}

}  // namespace refit::planner

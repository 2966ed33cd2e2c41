#include "planner/source_groups.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"

namespace refit::planner {
namespace {

struct GroupKey {
  int32_t tensor;
  const Box* box;

  template <typename H>
  friend H AbslHashValue(H h, const GroupKey& key) {
    return H::combine(std::move(h), key.tensor, key.box->offset, key.box->extent);
  }
  bool operator==(const GroupKey& other) const {
    return tensor == other.tensor && *box == *other.box;
  }
};

}  // namespace

std::vector<ViewGroup> GroupViews(const Layout& layout, const std::vector<int32_t>& tensor_map) {
  // Hash first (replicas are many, distinct boxes few), then order the distinct groups.
  std::vector<ViewGroup> groups;
  absl::flat_hash_map<GroupKey, int32_t> group_of;
  for (int32_t v = 0; v < static_cast<int32_t>(layout.views.size()); ++v) {
    const ViewInfo& view = layout.views[v];
    const int32_t tensor = tensor_map[view.tensor];
    if (tensor < 0) continue;
    auto [it, inserted] = group_of.emplace(GroupKey{tensor, &view.box}, groups.size());
    if (inserted) groups.push_back(ViewGroup{tensor, view.box, {}});
    groups[it->second].views.push_back(v);
  }
  std::vector<int32_t> order(groups.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    if (groups[a].tensor != groups[b].tensor) return groups[a].tensor < groups[b].tensor;
    return groups[a].box < groups[b].box;
  });
  std::vector<ViewGroup> sorted;
  sorted.reserve(groups.size());
  for (int32_t g : order) sorted.push_back(std::move(groups[g]));
  return sorted;
}

}  // namespace refit::planner

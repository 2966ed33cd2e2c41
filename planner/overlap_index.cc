#include "planner/overlap_index.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"

namespace refit::planner {

OverlapIndex::OverlapIndex(const std::vector<ViewGroup>& groups, int32_t num_tensors)
    : groups_(groups), tensors_(num_tensors) {
  std::vector<std::vector<int32_t>> members(num_tensors);
  for (int32_t g = 0; g < static_cast<int32_t>(groups.size()); ++g) {
    members[groups[g].tensor].push_back(g);
  }
  for (int32_t t = 0; t < num_tensors; ++t) {
    TensorIndex& index = tensors_[t];
    if (members[t].empty()) continue;
    // Index along the dim with the most distinct starts: the one the sources split.
    const size_t rank = groups[members[t][0]].box.rank();
    size_t best_count = 0;
    for (size_t d = 0; d < rank; ++d) {
      absl::flat_hash_set<int64_t> starts;
      for (int32_t g : members[t]) starts.insert(groups[g].box.offset[d]);
      if (starts.size() > best_count) {
        best_count = starts.size();
        index.dim = d;
      }
    }
    index.by_start = members[t];
    const size_t dim = index.dim;
    std::stable_sort(index.by_start.begin(), index.by_start.end(), [&](int32_t a, int32_t b) {
      return groups[a].box.offset[dim] < groups[b].box.offset[dim];
    });
    int64_t running = 0;
    for (int32_t g : index.by_start) {
      running = std::max(running, groups[g].box.offset[dim] + groups[g].box.extent[dim]);
      index.running_end.push_back(running);
    }
  }
}

void OverlapIndex::Query(int32_t tensor, const Box& box, std::vector<int32_t>* out) const {
  const TensorIndex& index = tensors_[tensor];
  if (index.by_start.empty()) return;
  const size_t dim = index.dim;
  const int64_t lo = box.offset[dim], hi = box.offset[dim] + box.extent[dim];
  // First position whose running end passes lo: nothing before it can reach the box.
  size_t i = std::upper_bound(index.running_end.begin(), index.running_end.end(), lo) -
             index.running_end.begin();
  const size_t first = out->size();
  for (; i < index.by_start.size(); ++i) {
    const ViewGroup& group = groups_[index.by_start[i]];
    if (group.box.offset[dim] >= hi) break;
    if (Overlaps(group.box, box)) out->push_back(index.by_start[i]);
  }
  std::sort(out->begin() + first, out->end());
}

}  // namespace refit::planner

// Candidates of which the planner repeatedly takes the least loaded (the GPU that has sent
// the fewest bytes over its NIC so far), while its choices load them: a heap whose keys are
// refreshed lazily. Loads only grow, so a candidate on top whose key is still its load is
// the least loaded of all. Ties go to the candidate added first, exactly as a scan in
// insertion order with a strict comparison would choose.
//
// The reshard planner picks a sender for every domain a piece goes to among up to every
// replica of the piece: a scan made DeepSeek-V3 at 2,048 ranks spend most of its routing
// time there.
#ifndef REFIT_PLANNER_LEAST_LOADED_SET_H_
#define REFIT_PLANNER_LEAST_LOADED_SET_H_

#include <algorithm>
#include <cstdint>
#include <vector>

namespace refit::planner {

// `LoadOf` maps a candidate id to its current load (int64_t) and never decreases.
template <typename LoadOf>
class LeastLoadedSet {
 public:
  explicit LeastLoadedSet(LoadOf load_of) : load_of_(load_of) {}

  void Clear() {
    heap_.clear();
    added_ = 0;
  }
  bool empty() const { return heap_.empty(); }

  void Add(int32_t id) {
    heap_.push_back(Entry{load_of_(id), added_++, id});
    std::push_heap(heap_.begin(), heap_.end(), Later);
  }

  // The least loaded candidate (the first added among equals); the set must not be empty.
  int32_t Least() {
    for (;;) {
      Entry& top = heap_.front();
      const int64_t load = load_of_(top.id);
      if (load == top.load) return top.id;
      std::pop_heap(heap_.begin(), heap_.end(), Later);
      heap_.back().load = load;
      std::push_heap(heap_.begin(), heap_.end(), Later);
    }
  }

 private:
  struct Entry {
    int64_t load;
    int32_t order;  // when it was added
    int32_t id;
  };
  // The heap's comparison: a is below b when it is more loaded, or as loaded and later.
  static bool Later(const Entry& a, const Entry& b) {
    return a.load != b.load ? a.load > b.load : a.order > b.order;
  }

  LoadOf load_of_;
  std::vector<Entry> heap_;
  int32_t added_ = 0;
};

}  // namespace refit::planner

#endif  // REFIT_PLANNER_LEAST_LOADED_SET_H_

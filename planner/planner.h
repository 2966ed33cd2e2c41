// Entry point of the planner: two compiled layouts and a topology in, a batched, priced,
// digested plan out. PlanCache serves a repeated request for unchanged layouts without
// planning again (the coordinator plans once per layout change).
#ifndef REFIT_PLANNER_PLANNER_H_
#define REFIT_PLANNER_PLANNER_H_

#include <cstddef>
#include <deque>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "planner/layout.h"
#include "planner/options.h"
#include "planner/plan.h"
#include "proto/refit.pb.h"

namespace refit::planner {

// Plans from scratch. Errors are INVALID_ARGUMENT naming the tensor, rank and box.
absl::StatusOr<std::shared_ptr<const Plan>> BuildPlan(const Layout& sources,
                                                      const Layout& destinations,
                                                      const v1::Topology& topology,
                                                      const PlanOptions& options);

// Plans keyed by (layout digests, topology, options); keeps the most recent `capacity`.
class PlanCache {
 public:
  explicit PlanCache(size_t capacity = 8) : capacity_(capacity) {}

  absl::StatusOr<std::shared_ptr<const Plan>> GetOrBuild(const Layout& sources,
                                                         const Layout& destinations,
                                                         const v1::Topology& topology,
                                                         const PlanOptions& options,
                                                         bool* from_cache = nullptr);

 private:
  const size_t capacity_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<const Plan>> plans_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> order_ ABSL_GUARDED_BY(mu_);
};

}  // namespace refit::planner

#endif  // REFIT_PLANNER_PLANNER_H_

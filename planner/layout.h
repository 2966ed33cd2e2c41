// A validated, indexed form of one side (sources or destinations) of a refit group.
// CompileLayout turns a LayoutSpec proto into it, rejecting bad input with errors that
// name the tensor, the rank and the box. Compiled layouts are immutable.
#ifndef REFIT_PLANNER_LAYOUT_H_
#define REFIT_PLANNER_LAYOUT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "planner/box.h"
#include "proto/refit.pb.h"

namespace refit::planner {

// The most ranks one side may have: plans address a rank in 24 bits (planner/plan.h).
inline constexpr int32_t kMaxRanksPerSide = (1 << 23) - 1;

struct TensorInfo {
  std::string name;
  std::string dtype;
  int element_bytes = 0;
  Dims shape;
};

struct BufferInfo {
  std::string name;
  int64_t bytes = 0;
};

// One view: a box of a tensor and where its elements sit in a rank's buffer.
struct ViewInfo {
  int32_t rank_index = 0;   // into Layout::ranks
  int32_t local_index = 0;  // position in the rank's `views` list (the wire's view id)
  int32_t tensor = 0;       // into Layout::tensors
  int32_t buffer = 0;       // into the rank's buffers
  Box box;
  int64_t byte_offset = 0;
  Dims strides;  // in elements, one per dim (row-major over the extent when not given)
  int64_t bytes = 0;
};

struct RankInfo {
  int64_t rank = 0;
  std::string host;
  int32_t device = 0;
  std::vector<int32_t> views;  // into Layout::views
  std::vector<BufferInfo> buffers;
  // Destinations: written through a staging bucket (RankLayout.bucketed): plans never
  // read its views.
  bool bucketed = false;
};

struct Layout {
  std::string side;  // "source" or "destination", for messages
  std::vector<TensorInfo> tensors;
  absl::flat_hash_map<std::string, int32_t> tensor_by_name;
  std::vector<RankInfo> ranks;
  std::vector<ViewInfo> views;
  // Content hash of everything above; equal layouts have equal digests.
  uint64_t digest = 0;

  const TensorInfo& TensorOf(const ViewInfo& view) const { return tensors[view.tensor]; }
};

// Validates and compiles one side. `side` ("source" / "destination") prefixes errors.
absl::StatusOr<Layout> CompileLayout(const v1::LayoutSpec& spec, const std::string& side);

// Byte offset of the element at global coordinate `coord` inside the view's buffer.
int64_t ElementByteOffset(const ViewInfo& view, int element_bytes, const Dims& coord);

}  // namespace refit::planner

#endif  // REFIT_PLANNER_LAYOUT_H_

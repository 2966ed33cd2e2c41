// Element types by their safetensors names, and their sizes in bytes.
#ifndef REFIT_PLANNER_DTYPE_H_
#define REFIT_PLANNER_DTYPE_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace refit::planner {

// Bytes per element of a safetensors dtype name (F64 ... BOOL); an error for unknown names.
absl::StatusOr<int> DtypeBytes(absl::string_view dtype);

}  // namespace refit::planner

#endif  // REFIT_PLANNER_DTYPE_H_

#include "planner/dtype.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace refit::planner {

absl::StatusOr<int> DtypeBytes(absl::string_view dtype) {
  static constexpr std::pair<const char*, int> kSizes[] = {
      {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"F8_E4M3", 1}, {"F8_E5M2", 1},
      {"I64", 8}, {"I32", 4}, {"I16", 2}, {"I8", 1},   {"U8", 1},      {"BOOL", 1},
  };
  for (const auto& [name, bytes] : kSizes) {
    if (dtype == name) return bytes;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype \"", dtype,
                   "\" (expected one of F64, F32, F16, BF16, F8_E4M3, F8_E5M2, I64, I32, I16, "
                   "I8, U8, BOOL)"));
}

}  // namespace refit::planner

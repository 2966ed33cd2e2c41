#include "transport/rank_placement.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace refit::transport {

absl::StatusOr<int32_t> RankPlacement::DaemonOf(v1::Role role, int64_t rank) const {
  auto it = daemons_.find({role, rank});
  if (it != daemons_.end()) return it->second;
  if (default_daemon_ >= 0) return default_daemon_;
  return absl::NotFoundError(absl::StrCat(RankName(role, rank), " has no daemon"));
}

}  // namespace refit::transport

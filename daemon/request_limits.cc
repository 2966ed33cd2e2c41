#include "daemon/request_limits.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace refit::daemon {
namespace {

absl::Status CheckName(const std::string& who, const char* what, const std::string& name,
                       size_t max_bytes) {
  if (name.size() > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": ", what, " of ", name.size(), " bytes; the limit is ", max_bytes));
  }
  if (name.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": ", what, " contains a NUL byte"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckRegistrationLimits(
    v1::Role role, const v1::RankLayout& layout,
    const google::protobuf::RepeatedPtrField<v1::TensorSpec>& tensors,
    const RegistrationLimits& limits) {
  if (role != v1::ROLE_SOURCE && role != v1::ROLE_DESTINATION) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", layout.rank(), ": role ",
                                                   static_cast<int>(role),
                                                   " is not source or destination"));
  }
  const std::string who =
      absl::StrCat(role == v1::ROLE_SOURCE ? "source" : "destination", " rank ", layout.rank());
  if (layout.rank() < 0 || layout.rank() > limits.max_rank) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": a rank is between 0 and ", limits.max_rank));
  }
  auto too_many = [&](const char* what, int count, int limit) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": ", count, " ", what, "; the limit is ", limit));
  };
  if (tensors.size() > limits.max_tensors) {
    return too_many("tensors", tensors.size(), limits.max_tensors);
  }
  if (layout.views_size() > limits.max_views) {
    return too_many("views", layout.views_size(), limits.max_views);
  }
  if (layout.buffers_size() > limits.max_buffers) {
    return too_many("buffers", layout.buffers_size(), limits.max_buffers);
  }
  absl::Status named = CheckName(who, "host name", layout.host(), limits.max_name_bytes);
  for (const v1::TensorSpec& t : tensors) {
    if (!named.ok()) return named;
    named = CheckName(who, "tensor name", t.name(), limits.max_name_bytes);
    if (named.ok() && t.shape_size() > limits.max_dims) {
      return too_many(absl::StrCat("dims in tensor ", t.name()).c_str(), t.shape_size(),
                      limits.max_dims);
    }
  }
  for (const v1::BufferSpec& b : layout.buffers()) {
    if (!named.ok()) return named;
    named = CheckName(who, "buffer name", b.name(), limits.max_name_bytes);
    if (named.ok())
      named = CheckName(who, "shared-memory name", b.shm_name(), limits.max_name_bytes);
  }
  for (int v = 0; v < layout.views_size() && named.ok(); ++v) {
    const v1::ShardView& view = layout.views(v);
    named = CheckName(who, "view tensor name", view.tensor(), limits.max_name_bytes);
    const int dims = std::max({view.offset_size(), view.extent_size(), view.strides_size()});
    if (named.ok() && dims > limits.max_dims) {
      return too_many(absl::StrCat("dims in view ", v).c_str(), dims, limits.max_dims);
    }
  }
  return named;
}

}  // namespace refit::daemon

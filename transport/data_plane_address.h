// The form in which a daemon's UCX worker address travels (hello, plan slices): a magic
// word, the length and an XXH3-64 of the UCX bytes, then the bytes. UCX parses a worker
// address without checking it, and a malformed one crashes the process that connects to
// it; a sealed address is checked here first, so a garbage or truncated address fails the
// hello or the epoch of the daemon that sent it, with a named error, and nothing else.
#ifndef REFIT_TRANSPORT_DATA_PLANE_ADDRESS_H_
#define REFIT_TRANSPORT_DATA_PLANE_ADDRESS_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace refit::transport {

// UCX worker addresses are a few hundred bytes; far above that is not one.
inline constexpr size_t kMaxUcxAddressBytes = 64 * 1024;

std::string SealDataPlaneAddress(std::string_view ucx_address);

// The UCX bytes of a sealed address; INVALID_ARGUMENT saying what is wrong with it.
absl::StatusOr<std::string> OpenDataPlaneAddress(std::string_view sealed);

}  // namespace refit::transport

#endif  // REFIT_TRANSPORT_DATA_PLANE_ADDRESS_H_

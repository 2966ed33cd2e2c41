// What the coordinator accepts from a control stream before it acts on it: a daemon's
// hello (node name, incarnation, GPU description, data-plane address, versions) and the
// versions that RPCs name. Whatever a peer sends, a field outside these bounds is refused
// with INVALID_ARGUMENT naming the field and the rule, so no name can forge a log line or
// bloat every Status answer, and no claimed version can overrule the group's.
#ifndef REFIT_DAEMON_CONTROL_VALIDATION_H_
#define REFIT_DAEMON_CONTROL_VALIDATION_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "proto/refit.pb.h"

namespace refit::daemon {

// Versions are 1 .. 2^53 (exact in a double, so JSON clients read them unchanged).
inline constexpr int64_t kMaxVersion = int64_t{1} << 53;

// OK for 1 .. kMaxVersion; INVALID_ARGUMENT naming `what` otherwise.
absl::Status CheckVersion(int64_t version, const std::string& what);

// A node or incarnation name: 1 to 253 characters of letters, digits and ". _ - : @"
// (host names, Kubernetes pod names, IP addresses), nothing that prints as another line.
absl::Status CheckNodeName(const std::string& name, const std::string& what);

absl::Status CheckHello(const v1::DaemonHello& hello);

}  // namespace refit::daemon

#endif  // REFIT_DAEMON_CONTROL_VALIDATION_H_

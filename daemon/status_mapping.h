// absl::Status -> grpc::Status at the edge of the daemons' gRPC services.
#ifndef REFIT_DAEMON_STATUS_MAPPING_H_
#define REFIT_DAEMON_STATUS_MAPPING_H_

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"

namespace refit::daemon {

inline grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

}  // namespace refit::daemon

#endif  // REFIT_DAEMON_STATUS_MAPPING_H_

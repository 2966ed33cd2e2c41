// C++ clients of refit's two gRPC APIs: the local daemon (ranks register their memory,
// publish versions, wait for versions) and the coordinator (orchestration triggers a
// refit and reads the cluster's status). Every call has a deadline.
#ifndef REFIT_CLIENT_DAEMON_CLIENTS_H_
#define REFIT_CLIENT_DAEMON_CLIENTS_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/client_context.h"
#include "proto/refit.grpc.pb.h"
#include "security/grpc_security.h"

namespace refit::client {

// Holds a rank's registration open (LocalDaemon.HoldRegistration): while this object
// lives, refitd keeps the rank; when it is destroyed, or the process dies and its
// connection closes, refitd deregisters the rank.
class RegistrationHold {
 public:
  ~RegistrationHold();
  RegistrationHold(const RegistrationHold&) = delete;
  RegistrationHold& operator=(const RegistrationHold&) = delete;

 private:
  friend class LocalDaemonClient;
  RegistrationHold() = default;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReader<v1::RegistrationHeld>> reader_;
};

class LocalDaemonClient {
 public:
  // `socket` is refitd's unix socket path.
  explicit LocalDaemonClient(const std::string& socket);

  absl::StatusOr<std::string> Register(
      v1::Role role, const v1::RankLayout& layout,
      const google::protobuf::RepeatedPtrField<v1::TensorSpec>& tensors,
      absl::Duration timeout = absl::Seconds(30));
  // Ties the registration `session` to this process's lifetime; returns once refitd holds it.
  absl::StatusOr<std::unique_ptr<RegistrationHold>> Hold(
      const std::string& session, absl::Duration timeout = absl::Seconds(10));
  absl::Status Deregister(v1::Role role, int64_t rank, absl::Duration timeout = absl::Seconds(10));
  absl::Status Publish(int64_t rank, int64_t version, absl::Duration timeout = absl::Seconds(10));
  absl::StatusOr<int64_t> WaitForVersion(int64_t rank, int64_t version, absl::Duration timeout);

 private:
  std::unique_ptr<v1::LocalDaemon::Stub> stub_;
};

class CoordinatorClient {
 public:
  // TLS and the token come from the environment (security/grpc_security.h); a bad setting
  // there is the error of every call.
  explicit CoordinatorClient(const std::string& address);

  absl::StatusOr<v1::RefitReport> Refit(int64_t version, absl::Duration timeout);
  absl::StatusOr<v1::StatusResponse> Status(absl::Duration timeout = absl::Seconds(10));
  absl::StatusOr<v1::LayoutsResponse> Layouts(absl::Duration timeout = absl::Seconds(30));

  // Streams the progress of the epoch that moves `version` (the running one, the next, or
  // one that already ended) to `on_progress` until it finishes, `timeout` passes, or
  // `context` is cancelled from another thread.
  absl::Status WatchEpochOf(int64_t version,
                            const std::function<void(const v1::EpochProgress&)>& on_progress,
                            absl::Duration timeout, grpc::ClientContext* context);

 private:
  // Sets the deadline and the token; the setup error, if any.
  absl::Status Prepare(grpc::ClientContext* context, absl::Duration timeout) const;

  absl::Status setup_;
  security::ClientSecurity security_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
};

}  // namespace refit::client

#endif  // REFIT_CLIENT_DAEMON_CLIENTS_H_

// Who may talk to the coordinator: TLS (and mutual TLS) on its gRPC port, and tokens that
// calls must carry ("authorization: Bearer TOKEN"): one for the public API, one (which may
// be the same) for the daemons' control streams. Clients (refitd,
// refitctl, the C++ CoordinatorClient) take their settings from the environment, so
// orchestration code hands them over as it hands over any secret:
//   REFIT_TLS_CA     CA certificate (PEM) that signed the coordinator's certificate: use TLS
//   REFIT_TLS_CERT   this client's certificate and
//   REFIT_TLS_KEY    key (PEM), for mutual TLS
//   REFIT_TOKEN_FILE file holding the token of the public API (Refit, Status, ...)
//   REFIT_DAEMON_TOKEN_FILE (refitd) file holding the token of the daemons' control
//                    streams, when the coordinator gives them their own; else
//                    REFIT_TOKEN_FILE's
// Token files and keys must not be readable by group or others.
#ifndef REFIT_SECURITY_GRPC_SECURITY_H_
#define REFIT_SECURITY_GRPC_SECURITY_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace refit::security {

struct ClientSecurity {
  std::string ca_file;    // empty: plaintext
  std::string cert_file;  // with key_file: present a client certificate
  std::string key_file;
  std::string token;  // empty: none sent
};

struct ServerSecurity {
  std::string cert_file;  // empty: plaintext
  std::string key_file;
  std::string client_ca_file;  // set: mutual TLS, clients must present a certificate it signed
  std::string token;           // set: calls of the public API must carry it
  std::string daemon_token;    // set: the daemons' control streams must carry it
};

// Which of the coordinator's services a client calls, so which token it carries.
enum class TokenFor { kPublicApi, kDaemonControl };

// The client settings from the environment (see above); errors name the file and why.
absl::StatusOr<ClientSecurity> ClientSecurityFromEnvironment(
    TokenFor audience = TokenFor::kPublicApi);

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const ClientSecurity& security);
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerSecurity& security);

// Adds the token, if any, to a call.
void AttachToken(const ClientSecurity& security, grpc::ClientContext* context);
// OK when no token is required or the call carries it; UNAUTHENTICATED otherwise, naming
// `token_variable`, where a client of that service takes its token from.
grpc::Status CheckToken(const std::string& required, const grpc::ServerContext& context,
                        const char* token_variable = "REFIT_TOKEN_FILE");

// Reads a token file: refused if group or others may read it, or if it is empty.
absl::StatusOr<std::string> ReadSecretFile(const std::string& path);

}  // namespace refit::security

#endif  // REFIT_SECURITY_GRPC_SECURITY_H_

#include "security/grpc_security.h"

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace refit::security {
namespace {

constexpr char kAuthorization[] = "authorization";

absl::StatusOr<std::string> ReadText(const std::string& path) {
  std::ifstream file(path);
  if (!file) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

absl::StatusOr<std::string> ReadPem(const std::string& path) {
  absl::StatusOr<std::string> text = ReadText(path);
  if (!text.ok()) return text.status();
  if (text->find("-----BEGIN") == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a PEM file"));
  }
  return text;
}

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? "" : value;
}

// Constant-time comparison, so the time taken says nothing about the token.
bool SameSecret(const std::string& a, const std::string& b) {
  unsigned char difference = a.size() != b.size();
  for (size_t i = 0; i < a.size(); ++i) difference |= a[i] ^ b[i % std::max<size_t>(b.size(), 1)];
  return difference == 0;
}

}  // namespace

absl::StatusOr<std::string> ReadSecretFile(const std::string& path) {
  struct stat info;
  if (stat(path.c_str(), &info) != 0)
    return absl::NotFoundError(absl::StrCat("cannot read ", path));
  if ((info.st_mode & 077) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat(path, " may be read by group or others; chmod 600 it"));
  }
  absl::StatusOr<std::string> text = ReadText(path);
  if (!text.ok()) return text.status();
  const std::string secret(absl::StripAsciiWhitespace(*text));
  if (secret.empty()) return absl::InvalidArgumentError(absl::StrCat(path, " is empty"));
  return secret;
}

absl::StatusOr<ClientSecurity> ClientSecurityFromEnvironment(TokenFor audience) {
  ClientSecurity security;
  security.ca_file = Env("REFIT_TLS_CA");
  security.cert_file = Env("REFIT_TLS_CERT");
  security.key_file = Env("REFIT_TLS_KEY");
  if (security.cert_file.empty() != security.key_file.empty()) {
    return absl::InvalidArgumentError("REFIT_TLS_CERT and REFIT_TLS_KEY go together");
  }
  if (!security.cert_file.empty() && security.ca_file.empty()) {
    return absl::InvalidArgumentError("a client certificate needs REFIT_TLS_CA (TLS) as well");
  }
  std::string token_file = Env("REFIT_TOKEN_FILE");
  if (audience == TokenFor::kDaemonControl && !Env("REFIT_DAEMON_TOKEN_FILE").empty()) {
    token_file = Env("REFIT_DAEMON_TOKEN_FILE");
  }
  if (!token_file.empty()) {
    absl::StatusOr<std::string> token = ReadSecretFile(token_file);
    if (!token.ok()) return token.status();
    security.token = *token;
  }
  return security;
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const ClientSecurity& security) {
  if (security.ca_file.empty()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions options;
  absl::StatusOr<std::string> ca = ReadPem(security.ca_file);
  if (!ca.ok()) return ca.status();
  options.pem_root_certs = *ca;
  if (!security.cert_file.empty()) {
    absl::StatusOr<std::string> cert = ReadPem(security.cert_file);
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadSecretFile(security.key_file);
    if (!key.ok()) return key.status();
    options.pem_cert_chain = *cert;
    options.pem_private_key = *key + "\n";
  }
  return grpc::SslCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerSecurity& security) {
  if (security.cert_file.empty()) {
    if (!security.client_ca_file.empty()) {
      return absl::InvalidArgumentError("mutual TLS needs the server's certificate and key");
    }
    return grpc::InsecureServerCredentials();
  }
  absl::StatusOr<std::string> cert = ReadPem(security.cert_file);
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadSecretFile(security.key_file);
  if (!key.ok()) return key.status();
  grpc::SslServerCredentialsOptions options(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  options.pem_key_cert_pairs.push_back({*key + "\n", *cert});
  if (!security.client_ca_file.empty()) {
    absl::StatusOr<std::string> client_ca = ReadPem(security.client_ca_file);
    if (!client_ca.ok()) return client_ca.status();
    options.pem_root_certs = *client_ca;
    options.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(options);
}

void AttachToken(const ClientSecurity& security, grpc::ClientContext* context) {
  if (!security.token.empty()) context->AddMetadata(kAuthorization, "Bearer " + security.token);
}

grpc::Status CheckToken(const std::string& required, const grpc::ServerContext& context,
                        const char* token_variable) {
  if (required.empty()) return grpc::Status::OK;
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(kAuthorization);
  const std::string presented =
      it == metadata.end() ? "" : std::string(it->second.data(), it->second.size());
  if (!SameSecret(presented, "Bearer " + required)) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        it == metadata.end() ? absl::StrCat("this coordinator requires a token (",
                                                            token_variable, ")")
                                             : "the token is wrong");
  }
  return grpc::Status::OK;
}

}  // namespace refit::security

#include "client/daemon_clients.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <thread>

#include "absl/status/status.h"

namespace refit::client {
namespace {

absl::Status FromGrpc(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

void SetDeadline(grpc::ClientContext* context, absl::Duration timeout) {
  context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
}

}  // namespace

LocalDaemonClient::LocalDaemonClient(const std::string& socket)
    : stub_(v1::LocalDaemon::NewStub(
          grpc::CreateChannel("unix:" + socket, grpc::InsecureChannelCredentials()))) {}

absl::StatusOr<std::string> LocalDaemonClient::Register(
    v1::Role role, const v1::RankLayout& layout,
    const google::protobuf::RepeatedPtrField<v1::TensorSpec>& tensors, absl::Duration timeout) {
  grpc::ClientContext context;
  SetDeadline(&context, timeout);
  v1::RegisterRankRequest request;
  request.set_role(role);
  *request.mutable_layout() = layout;
  *request.mutable_tensors() = tensors;
  v1::RegisterRankResponse response;
  absl::Status status = FromGrpc(stub_->RegisterRank(&context, request, &response));
  if (!status.ok()) return status;
  return response.session();
}

RegistrationHold::~RegistrationHold() {
  context_.TryCancel();
  if (reader_ != nullptr) reader_->Finish().IgnoreError();
}

absl::StatusOr<std::unique_ptr<RegistrationHold>> LocalDaemonClient::Hold(
    const std::string& session, absl::Duration timeout) {
  auto hold = std::unique_ptr<RegistrationHold>(new RegistrationHold());
  v1::HoldRegistrationRequest request;
  request.set_session(session);
  hold->reader_ = stub_->HoldRegistration(&hold->context_, request);
  // The stream itself has no deadline (it lasts as long as the rank); the first message
  // must come within `timeout`.
  std::atomic<bool> answered{false};
  std::thread watchdog([&]() {
    const absl::Time deadline = absl::Now() + timeout;
    while (!answered && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(10));
    if (!answered) hold->context_.TryCancel();
  });
  v1::RegistrationHeld held;
  const bool ok = hold->reader_->Read(&held);
  answered = true;
  watchdog.join();
  if (!ok) {
    absl::Status status = FromGrpc(hold->reader_->Finish());
    hold->reader_.reset();
    if (status.ok() || status.code() == absl::StatusCode::kCancelled) {
      return absl::DeadlineExceededError("refitd did not confirm the hold of registration " +
                                         session + " in time");
    }
    return status;
  }
  return hold;
}

absl::Status LocalDaemonClient::Deregister(v1::Role role, int64_t rank, absl::Duration timeout) {
  grpc::ClientContext context;
  SetDeadline(&context, timeout);
  v1::DeregisterRankRequest request;
  request.set_role(role);
  request.set_rank(rank);
  v1::DeregisterRankResponse response;
  return FromGrpc(stub_->DeregisterRank(&context, request, &response));
}

absl::Status LocalDaemonClient::Publish(int64_t rank, int64_t version, absl::Duration timeout) {
  grpc::ClientContext context;
  SetDeadline(&context, timeout);
  v1::PublishRequest request;
  request.set_rank(rank);
  request.set_version(version);
  v1::PublishResponse response;
  return FromGrpc(stub_->Publish(&context, request, &response));
}

absl::StatusOr<int64_t> LocalDaemonClient::WaitForVersion(int64_t rank, int64_t version,
                                                          absl::Duration timeout) {
  grpc::ClientContext context;
  SetDeadline(&context, timeout + absl::Seconds(5));  // the daemon answers at `timeout`
  v1::WaitForVersionRequest request;
  request.set_rank(rank);
  request.set_version(version);
  request.set_deadline_ms(absl::ToInt64Milliseconds(timeout));
  v1::WaitForVersionResponse response;
  absl::Status status = FromGrpc(stub_->WaitForVersion(&context, request, &response));
  if (!status.ok()) return status;
  return response.version();
}

CoordinatorClient::CoordinatorClient(const std::string& address) {
  absl::StatusOr<security::ClientSecurity> security = security::ClientSecurityFromEnvironment();
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      security.ok() ? security::MakeChannelCredentials(*security) : security.status();
  if (!credentials.ok()) {
    setup_ = credentials.status();
    credentials = grpc::InsecureChannelCredentials();  // never used: every call fails first
  } else {
    security_ = *security;
  }
  stub_ = v1::Coordinator::NewStub(grpc::CreateChannel(address, *credentials));
}

absl::Status CoordinatorClient::Prepare(grpc::ClientContext* context,
                                        absl::Duration timeout) const {
  SetDeadline(context, timeout);
  security::AttachToken(security_, context);
  return setup_;
}

absl::StatusOr<v1::RefitReport> CoordinatorClient::Refit(int64_t version, absl::Duration timeout) {
  grpc::ClientContext context;
  // The coordinator answers at `timeout`.
  if (absl::Status ready = Prepare(&context, timeout + absl::Seconds(5)); !ready.ok()) return ready;
  v1::RefitRequest request;
  request.set_version(version);
  request.set_deadline_ms(absl::ToInt64Milliseconds(timeout));
  v1::RefitReport report;
  absl::Status status = FromGrpc(stub_->Refit(&context, request, &report));
  if (!status.ok()) return status;
  return report;
}

absl::StatusOr<v1::StatusResponse> CoordinatorClient::Status(absl::Duration timeout) {
  grpc::ClientContext context;
  if (absl::Status ready = Prepare(&context, timeout); !ready.ok()) return ready;
  v1::StatusResponse response;
  absl::Status status = FromGrpc(stub_->Status(&context, v1::StatusRequest(), &response));
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<v1::LayoutsResponse> CoordinatorClient::Layouts(absl::Duration timeout) {
  grpc::ClientContext context;
  if (absl::Status ready = Prepare(&context, timeout); !ready.ok()) return ready;
  v1::LayoutsResponse response;
  absl::Status status = FromGrpc(stub_->Layouts(&context, v1::LayoutsRequest(), &response));
  if (!status.ok()) return status;
  return response;
}

absl::Status CoordinatorClient::WatchEpochOf(
    int64_t version, const std::function<void(const v1::EpochProgress&)>& on_progress,
    absl::Duration timeout, grpc::ClientContext* context) {
  if (absl::Status ready = Prepare(context, timeout + absl::Seconds(5)); !ready.ok()) return ready;
  v1::WatchEpochRequest request;
  request.set_timeout_ms(absl::ToInt64Milliseconds(timeout));
  request.set_version(version);
  auto reader = stub_->WatchEpoch(context, request);
  v1::EpochProgress progress;
  while (reader->Read(&progress)) on_progress(progress);
  return FromGrpc(reader->Finish());
}

}  // namespace refit::client

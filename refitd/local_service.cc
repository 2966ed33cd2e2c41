#include "refitd/local_service.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "daemon/control_validation.h"
#include "daemon/status_mapping.h"
#include "spdlog/spdlog.h"

namespace refit::daemon {
namespace {

absl::Time DeadlineOf(const grpc::ServerContext& context, int64_t deadline_ms) {
  // The earlier of the client's gRPC deadline and the request's own.
  absl::Time deadline = absl::FromChrono(context.deadline());
  if (deadline_ms > 0) deadline = std::min(deadline, absl::Now() + absl::Milliseconds(deadline_ms));
  return deadline;
}

// Serves a rank's server stream (its buckets, its write notices): `serve(send, ended)` sends
// through `writer` until the process goes away (the call is cancelled) or the rank of
// `session` leaves.
template <typename Message, typename Serve>
grpc::Status ServeRankStream(grpc::ServerContext* context, RankRegistry* registry,
                             const std::string& session, grpc::ServerWriter<Message>* writer,
                             const Serve& serve) {
  serve([writer](const Message& message) { return writer->Write(message); },
        [&] {
          if (context->IsCancelled()) return true;
          absl::StatusOr<bool> ended = registry->AwaitSessionEnd(session, absl::Now());
          return !ended.ok() || *ended;
        });
  return context->IsCancelled()
             ? grpc::Status(grpc::StatusCode::CANCELLED, "the rank's process went away")
             : grpc::Status::OK;
}

}  // namespace

grpc::Status LocalService::RegisterRank(grpc::ServerContext*,
                                        const v1::RegisterRankRequest* request,
                                        v1::RegisterRankResponse* response) {
  absl::StatusOr<std::string> session = registry_->Register(*request);
  if (!session.ok()) return ToGrpc(session.status());
  response->set_session(*session);
  return grpc::Status::OK;
}

grpc::Status LocalService::HoldRegistration(grpc::ServerContext* context,
                                            const v1::HoldRegistrationRequest* request,
                                            grpc::ServerWriter<v1::RegistrationHeld>* writer) {
  // Checks the session exists before promising anything.
  absl::StatusOr<bool> ended = registry_->AwaitSessionEnd(request->session(), absl::Now());
  if (!ended.ok()) return ToGrpc(ended.status());
  if (*ended) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "registration session " + request->session() + " has already ended");
  }
  v1::RegistrationHeld held;
  held.set_session(request->session());
  if (!writer->Write(held)) {
    registry_->DeregisterSession(request->session(), /*reclaim_shared_memory=*/true);
    return grpc::Status(grpc::StatusCode::CANCELLED, "the rank went away");
  }
  // A closed connection shows up as cancellation; look every 100 ms.
  while (true) {
    ended = registry_->AwaitSessionEnd(request->session(), absl::Now() + absl::Milliseconds(100));
    if (ended.ok() && *ended) return grpc::Status::OK;
    if (context->IsCancelled()) {
      spdlog::info("refitd: the process holding registration session {} went away",
                   request->session());
      registry_->DeregisterSession(request->session(), /*reclaim_shared_memory=*/true);
      return grpc::Status(grpc::StatusCode::CANCELLED, "the rank went away");
    }
  }
}

grpc::Status LocalService::ReceiveBuckets(grpc::ServerContext* context,
                                          const v1::ReceiveBucketsRequest* request,
                                          grpc::ServerWriter<v1::Bucket>* writer) {
  absl::StatusOr<int64_t> rank = registry_->BucketedRankOf(request->session());
  if (!rank.ok()) return ToGrpc(rank.status());
  return ServeRankStream(
      context, registry_, request->session(), writer, [&](const auto& send, const auto& ended) {
        registry_->bucket_streams().Serve(*rank, request->session(), send, ended);
      });
}

grpc::Status LocalService::BucketDone(grpc::ServerContext*, const v1::BucketDoneRequest* request,
                                      v1::BucketDoneResponse*) {
  absl::StatusOr<int64_t> rank = registry_->BucketedRankOf(request->session());
  if (!rank.ok()) return ToGrpc(rank.status());
  return ToGrpc(registry_->bucket_streams().Done(*rank, request->session(), request->epoch_id(),
                                                 request->sequence(), request->error()));
}

grpc::Status LocalService::WatchWrites(grpc::ServerContext* context,
                                       const v1::WatchWritesRequest* request,
                                       grpc::ServerWriter<v1::WriteNotice>* writer) {
  absl::StatusOr<int64_t> rank = registry_->PausingRankOf(request->session());
  if (!rank.ok()) return ToGrpc(rank.status());
  return ServeRankStream(context, registry_, request->session(), writer,
                         [&](const auto& send, const auto& ended) {
                           registry_->engine_pauses().Serve(*rank, request->session(), send, ended);
                         });
}

grpc::Status LocalService::Paused(grpc::ServerContext*, const v1::PausedRequest* request,
                                  v1::PausedResponse*) {
  absl::StatusOr<int64_t> rank = registry_->PausingRankOf(request->session());
  if (!rank.ok()) return ToGrpc(rank.status());
  return ToGrpc(registry_->engine_pauses().Paused(*rank, request->session(), request->pause_id()));
}

grpc::Status LocalService::DeregisterRank(grpc::ServerContext*,
                                          const v1::DeregisterRankRequest* request,
                                          v1::DeregisterRankResponse*) {
  return ToGrpc(registry_->Deregister(request->role(), request->rank()));
}

grpc::Status LocalService::Publish(grpc::ServerContext*, const v1::PublishRequest* request,
                                   v1::PublishResponse*) {
  // Refused here, naming the limit: the coordinator would drop a version it cannot carry,
  // and the rank could never publish again (a later version must be newer).
  if (absl::Status version = CheckVersion(
          request->version(), absl::StrCat("Publish: source rank ", request->rank(), "'s version"));
      !version.ok()) {
    return ToGrpc(version);
  }
  return ToGrpc(registry_->Publish(request->rank(), request->version()));
}

grpc::Status LocalService::WaitForVersion(grpc::ServerContext* context,
                                          const v1::WaitForVersionRequest* request,
                                          v1::WaitForVersionResponse* response) {
  if (request->deadline_ms() <= 0 &&
      context->deadline() == std::chrono::system_clock::time_point::max()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "WaitForVersion needs a deadline (deadline_ms or a gRPC deadline)");
  }
  if (absl::Status valid = CheckVersion(
          request->version(),
          absl::StrCat("WaitForVersion: destination rank ", request->rank(), "'s version"));
      !valid.ok()) {
    return ToGrpc(valid);
  }
  absl::StatusOr<int64_t> version = registry_->WaitForVersion(
      request->rank(), request->version(), DeadlineOf(*context, request->deadline_ms()),
      [context]() { return context->IsCancelled(); }, request->ignore_earlier_aborts());
  if (!version.ok()) return ToGrpc(version.status());
  response->set_version(*version);
  return grpc::Status::OK;
}

}  // namespace refit::daemon

// The gRPC API refitd serves to the ranks of its node on a unix socket: thin handlers
// that check the request and call the RankRegistry.
#ifndef REFIT_REFITD_LOCAL_SERVICE_H_
#define REFIT_REFITD_LOCAL_SERVICE_H_

#include "proto/refit.grpc.pb.h"
#include "refitd/rank_registry.h"

namespace refit::daemon {

class LocalService final : public v1::LocalDaemon::Service {
 public:
  explicit LocalService(RankRegistry* registry) : registry_(registry) {}

  grpc::Status RegisterRank(grpc::ServerContext* context, const v1::RegisterRankRequest* request,
                            v1::RegisterRankResponse* response) override;
  grpc::Status HoldRegistration(grpc::ServerContext* context,
                                const v1::HoldRegistrationRequest* request,
                                grpc::ServerWriter<v1::RegistrationHeld>* writer) override;
  grpc::Status DeregisterRank(grpc::ServerContext* context,
                              const v1::DeregisterRankRequest* request,
                              v1::DeregisterRankResponse* response) override;
  grpc::Status Publish(grpc::ServerContext* context, const v1::PublishRequest* request,
                       v1::PublishResponse* response) override;
  grpc::Status WaitForVersion(grpc::ServerContext* context,
                              const v1::WaitForVersionRequest* request,
                              v1::WaitForVersionResponse* response) override;
  grpc::Status ReceiveBuckets(grpc::ServerContext* context,
                              const v1::ReceiveBucketsRequest* request,
                              grpc::ServerWriter<v1::Bucket>* writer) override;
  grpc::Status BucketDone(grpc::ServerContext* context, const v1::BucketDoneRequest* request,
                          v1::BucketDoneResponse* response) override;
  grpc::Status WatchWrites(grpc::ServerContext* context, const v1::WatchWritesRequest* request,
                           grpc::ServerWriter<v1::WriteNotice>* writer) override;
  grpc::Status Paused(grpc::ServerContext* context, const v1::PausedRequest* request,
                      v1::PausedResponse* response) override;

 private:
  RankRegistry* registry_;
};

}  // namespace refit::daemon

#endif  // REFIT_REFITD_LOCAL_SERVICE_H_

// The adversarial suite's cluster: a real refit-coordinator and a real refitd, started
// once for the suite, and the hostile clients that poke them over the wire (refitd's unix
// socket, the coordinator's gRPC port, raw TCP). After every case both processes must be
// alive, and hold no more threads or descriptors than a bounded margin over what they held
// before it.
#ifndef REFIT_TESTS_ADVERSARIAL_HOSTILE_CLUSTER_H_
#define REFIT_TESTS_ADVERSARIAL_HOSTILE_CLUSTER_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "proto/refit.grpc.pb.h"
#include "tests/adversarial/processes.h"
#include "transport/testing/backed_layouts.h"

namespace refit::testing {

class HostileClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite();
  static void TearDownTestSuite();
  void SetUp() override;
  void TearDown() override;  // alive, no threads or descriptors leaked

  // A well-formed registration: rank `rank` holding the whole [16, 8] F32 tensor "w" in
  // a fresh segment (poisoned, 512 bytes).
  v1::RegisterRankRequest GoodRequest(v1::Role role, int64_t rank);
  grpc::Status Register(const v1::RegisterRankRequest& request, std::string* session = nullptr);
  grpc::Status Deregister(v1::Role role, int64_t rank);
  grpc::Status Publish(int64_t rank, int64_t version);
  grpc::Status WaitForVersion(int64_t rank, int64_t version, int64_t deadline_ms);
  grpc::Status Refit(int64_t version, int64_t deadline_ms, v1::RefitReport* report = nullptr);
  // Opens a control stream, says `hello` and reads the answer; the stream's final status.
  grpc::Status SayHello(const v1::DaemonHello& hello);
  v1::DaemonHello GoodHello(const std::string& node);
  // The coordinator's current version (Status).
  int64_t CurrentVersion();
  // Waits until the coordinator holds exactly `sources` and `destinations` ranks. A
  // registration or deregistration through refitd reaches it over refitd's stream after
  // the local call returns; false (with the counts) if it does not within a few seconds.
  ::testing::AssertionResult CoordinatorHolds(int sources, int destinations);
  // Waits until refitd and the coordinator hold at most `threads` more threads than their
  // baseline (measured once, warmed up and at rest, before the first case); false (with
  // the counts) if they do not within a few seconds.
  ::testing::AssertionResult ThreadsSettle(int threads = 16);

  static ChildProcess* coordinator() { return coordinator_; }
  static ChildProcess* refitd() { return refitd_; }
  static const std::string& folder() { return folder_; }
  static const std::string& coordinator_address() { return coordinator_address_; }
  static const std::string& socket_path() { return socket_; }
  // Versions only grow across the suite's cases.
  static int64_t NextVersion() { return ++version_; }

  std::unique_ptr<v1::LocalDaemon::Stub> local_;
  std::unique_ptr<v1::Coordinator::Stub> coordinator_stub_;
  std::unique_ptr<v1::CoordinatorControl::Stub> control_stub_;
  transport::testing::BackedLayouts backed_;

 private:
  static ChildProcess* coordinator_;
  static ChildProcess* refitd_;
  static std::string folder_, coordinator_address_, socket_;
  static int64_t version_;
  // Threads and descriptors of the coordinator and refitd once both are warm (every kind
  // of call served once, refitd connected) and their counts have stopped changing.
  static void MeasureBaseline();
  static int threads_baseline_[2];
  static int files_baseline_[2];
};

}  // namespace refit::testing

#endif  // REFIT_TESTS_ADVERSARIAL_HOSTILE_CLUSTER_H_

// Hostile input on refitd's local socket: every registration, publish, wait and hold that
// a buggy or malicious rank process can send. Each case asserts the named error, and the
// fixture asserts that refitd and the coordinator are alive and leaked nothing.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <limits>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "tests/adversarial/hostile_cluster.h"

namespace refit::testing {
namespace {

using ::testing::HasSubstr;

using LocalApiTest = HostileClusterTest;

// Register fails with `code` and a message holding `fragment`.
#define EXPECT_REFUSED(request, code, fragment)                \
  do {                                                         \
    const grpc::Status refused = Register(request);            \
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::code);   \
    EXPECT_THAT(refused.error_message(), HasSubstr(fragment)); \
  } while (0)

TEST_F(LocalApiTest, RoleZeroIsRefused) {
  v1::RegisterRankRequest request = GoodRequest(v1::ROLE_SOURCE, 0);
  request.set_role(static_cast<v1::Role>(0));
  EXPECT_REFUSED(request, INVALID_ARGUMENT, "role must be source or destination");
}

TEST_F(LocalApiTest, RoleNinetyNineIsRefused) {
  v1::RegisterRankRequest request = GoodRequest(v1::ROLE_SOURCE, 0);
  request.set_role(static_cast<v1::Role>(99));
  EXPECT_REFUSED(request, INVALID_ARGUMENT, "role must be source or destination");
}

TEST_F(LocalApiTest, NegativeRankIsRefused) {
  v1::RegisterRankRequest request = GoodRequest(v1::ROLE_SOURCE, 0);
  request.mutable_layout()->set_rank(-3);
  EXPECT_REFUSED(request, INVALID_ARGUMENT, "a rank is between 0 and");
}

TEST_F(LocalApiTest, HugeRankIsRefused) {
  v1::RegisterRankRequest request = GoodRequest(v1::ROLE_SOURCE, 0);
  request.mutable_layout()->set_rank(int64_t{1} << 40);
  EXPECT_REFUSED(request, INVALID_ARGUMENT, "a rank is between 0 and");
}

TEST_F(LocalApiTest, TooManyViewsAreRefusedAtTheEdge) {
  v1::RegisterRankRequest request = GoodRequest(v1::ROLE_SOURCE, 0);
  const v1::ShardView view = request.layout().views(0);
  for (int i = 0; i < (1 << 16); ++i) *request.mutable_layout()->add_views() = view;
  EXPECT_REFUSED(request, INVALID_ARGUMENT, "views; the limit is 65536");
}

TEST_F(LocalApiTest, OverlongTensorNameIsRefused) {
  v1::RegisterRankRequest request = GoodRequest(v1::ROLE_SOURCE, 0);
  const std::string name(300, 't');
  request.mutable_tensors(0)->set_name(name);
  request.mutable_layout()->mutable_views(0)->set_tensor(name);
  EXPECT_REFUSED(request, INVALID_ARGUMENT, "tensor name of 300 bytes");
}

TEST_F(LocalApiTest, TensorNameWithANulByteIsRefused) {
  v1::RegisterRankRequest request = GoodRequest(v1::ROLE_SOURCE, 0);
  const std::string name("w\0x", 3);
  request.mutable_tensors(0)->set_name(name);
  request.mutable_layout()->mutable_views(0)->set_tensor(name);
  EXPECT_REFUSED(request, INVALID_ARGUMENT, "contains a NUL byte");
}

TEST_F(LocalApiTest, NineDimsAreRefused) {
  v1::RegisterRankRequest request = GoodRequest(v1::ROLE_SOURCE, 0);
  for (int i = 0; i < 7; ++i) request.mutable_tensors(0)->add_shape(1);
  EXPECT_REFUSED(request, INVALID_ARGUMENT, "9 dims in tensor w; the limit is 8");
}

TEST_F(LocalApiTest, AStrideThatWrapsInt64IsRefused) {
  v1::RegisterRankRequest request = GoodRequest(v1::ROLE_SOURCE, 0);
  v1::ShardView* view = request.mutable_layout()->mutable_views(0);
  view->add_strides(int64_t{1} << 60);
  view->add_strides(1);
  EXPECT_REFUSED(request, INVALID_ARGUMENT, "reaches past byte 2^60");
}

TEST_F(LocalApiTest, AByteOffsetNearInt64MaxIsRefused) {
  v1::RegisterRankRequest request = GoodRequest(v1::ROLE_SOURCE, 0);
  request.mutable_layout()->mutable_views(0)->set_byte_offset(std::numeric_limits<int64_t>::max() -
                                                              7);
  EXPECT_REFUSED(request, INVALID_ARGUMENT, "byte_offset 9223372036854775800");
}

TEST_F(LocalApiTest, ANegativeExtentIsRefused) {
  v1::RegisterRankRequest request = GoodRequest(v1::ROLE_SOURCE, 0);
  request.mutable_layout()->mutable_views(0)->set_extent(0, -1);
  EXPECT_REFUSED(request, INVALID_ARGUMENT, "negative extent");
}

// What torch.chunk, DTensor and FSDP2 give the trailing ranks of a small tensor: a shard
// with no elements, wherever its byte_offset points.
TEST_F(LocalApiTest, AZeroExtentViewBesideARealOneIsAccepted) {
  v1::RegisterRankRequest request = GoodRequest(v1::ROLE_SOURCE, 0);
  v1::ShardView empty = request.layout().views(0);
  empty.set_offset(0, 16);
  empty.set_extent(0, 0);
  empty.set_byte_offset(int64_t{1} << 40);  // past the buffer: it spans no bytes
  *request.mutable_layout()->add_views() = empty;
  const grpc::Status accepted = Register(request);
  EXPECT_TRUE(accepted.ok()) << accepted.error_message();
  ASSERT_TRUE(Deregister(v1::ROLE_SOURCE, 0).ok());
}

TEST_F(LocalApiTest, AViewOutsideTheTensorIsRefused) {
  v1::RegisterRankRequest request = GoodRequest(v1::ROLE_SOURCE, 0);
  request.mutable_layout()->mutable_views(0)->set_offset(0, 8);
  EXPECT_REFUSED(request, INVALID_ARGUMENT, "lies outside the global shape");
}

TEST_F(LocalApiTest, AnUnknownDtypeIsRefused) {
  v1::RegisterRankRequest request = GoodRequest(v1::ROLE_SOURCE, 0);
  request.mutable_tensors(0)->set_dtype("F128");
  EXPECT_REFUSED(request, INVALID_ARGUMENT, "F128");
}

TEST_F(LocalApiTest, AMissingSegmentIsNamed) {
  v1::RegisterRankRequest request = GoodRequest(v1::ROLE_SOURCE, 0);
  request.mutable_layout()->mutable_buffers(0)->set_shm_name("/refit-hostile-no-such-segment");
  EXPECT_REFUSED(request, NOT_FOUND, "/refit-hostile-no-such-segment");
}

TEST_F(LocalApiTest, ASegmentNameOutsideDevShmIsRefused) {
  v1::RegisterRankRequest request = GoodRequest(v1::ROLE_SOURCE, 0);
  request.mutable_layout()->mutable_buffers(0)->set_shm_name("/../../etc/passwd");
  EXPECT_REFUSED(request, INVALID_ARGUMENT, "no \"/\"");
}

TEST_F(LocalApiTest, ASegmentSmallerThanItsViewsIsRefused) {
  v1::RegisterRankRequest request = GoodRequest(v1::ROLE_SOURCE, 0);
  const std::string name = request.layout().buffers(0).shm_name();
  const int fd = shm_open(name.c_str(), O_RDWR, 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 100), 0);
  close(fd);
  EXPECT_REFUSED(request, INVALID_ARGUMENT, "holds 100 bytes, fewer than the 512");
}

TEST_F(LocalApiTest, ABufferWithBothAShmNameAndACudaHandleIsRefused) {
  v1::RegisterRankRequest request = GoodRequest(v1::ROLE_SOURCE, 0);
  request.mutable_layout()->mutable_buffers(0)->set_cuda_ipc_handle(std::string(64, 'h'));
  EXPECT_REFUSED(request, INVALID_ARGUMENT,
                 "needs either a shared-memory name or a CUDA IPC handle");
}

TEST_F(LocalApiTest, AStagedSourceIsRefused) {
  v1::RegisterRankRequest request = GoodRequest(v1::ROLE_SOURCE, 0);
  request.mutable_layout()->set_staged(true);
  EXPECT_REFUSED(request, INVALID_ARGUMENT, "only destination ranks can be staged");
}

TEST_F(LocalApiTest, AMessageOverTheSocketLimitIsRefusedByGrpc) {
  v1::RegisterRankRequest request = GoodRequest(v1::ROLE_SOURCE, 0);
  request.mutable_layout()->set_host(std::string(70 << 20, 'h'));
  EXPECT_EQ(Register(request).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
}

TEST_F(LocalApiTest, AConflictingTensorDeclarationIsRefusedAndForgottenWithItsRank) {
  ASSERT_TRUE(Register(GoodRequest(v1::ROLE_SOURCE, 0)).ok());
  v1::RegisterRankRequest other = GoodRequest(v1::ROLE_SOURCE, 1);
  other.mutable_tensors(0)->set_dtype("BF16");
  EXPECT_REFUSED(other, INVALID_ARGUMENT, "w: declared again with a different dtype or shape");
  // The other side declares its own: an inference rank may hold w in another dtype (FP8
  // codes of a BF16 weight); whether the two sides agree is the planner's to say.
  v1::RegisterRankRequest inference = GoodRequest(v1::ROLE_DESTINATION, 0);
  inference.mutable_tensors(0)->set_dtype("BF16");
  const grpc::Status own_dtype = Register(inference);
  EXPECT_TRUE(own_dtype.ok()) << own_dtype.error_message();
  ASSERT_TRUE(Deregister(v1::ROLE_DESTINATION, 0).ok());
  // Once the rank that declared w leaves, a new model's w is welcome.
  ASSERT_TRUE(Deregister(v1::ROLE_SOURCE, 0).ok());
  v1::RegisterRankRequest changed = GoodRequest(v1::ROLE_SOURCE, 0);
  changed.mutable_tensors(0)->set_dtype("BF16");
  const grpc::Status accepted = Register(changed);
  EXPECT_TRUE(accepted.ok()) << accepted.error_message();
  ASSERT_TRUE(Deregister(v1::ROLE_SOURCE, 0).ok());
}

TEST_F(LocalApiTest, ARankRegisteredTwiceIsRefusedAfterTheGrace) {
  ASSERT_TRUE(Register(GoodRequest(v1::ROLE_SOURCE, 0)).ok());
  EXPECT_REFUSED(GoodRequest(v1::ROLE_SOURCE, 0), ALREADY_EXISTS, "already registered on node-a");
  ASSERT_TRUE(Deregister(v1::ROLE_SOURCE, 0).ok());
}

TEST_F(LocalApiTest, AGuessedSessionIdHoldsNothingAndEndsNothing) {
  std::string session;
  ASSERT_TRUE(Register(GoodRequest(v1::ROLE_SOURCE, 0), &session).ok());
  // The real id with its last hex digit changed: one digit off is as good as a guess.
  std::string near_miss = session;
  near_miss.back() = near_miss.back() == '0' ? '1' : '0';
  for (const std::string& guess :
       {std::string("node-a/1"), std::string("node-a/2"), near_miss, std::string()}) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::HoldRegistrationRequest request;
    request.set_session(guess);
    auto reader = local_->HoldRegistration(&context, request);
    v1::RegistrationHeld held;
    EXPECT_FALSE(reader->Read(&held)) << guess;
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::NOT_FOUND) << guess;
  }
  // The rank is still registered: a second registration of it is refused.
  EXPECT_REFUSED(GoodRequest(v1::ROLE_SOURCE, 0), ALREADY_EXISTS, "already registered");
  ASSERT_TRUE(Deregister(v1::ROLE_SOURCE, 0).ok());
}

TEST_F(LocalApiTest, PublishingForAnUnknownRankOrAnOldVersionIsRefused) {
  grpc::Status status = Publish(7, 1);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(status.error_message(), HasSubstr("source rank 7 is not registered on node-a"));
  ASSERT_TRUE(Register(GoodRequest(v1::ROLE_SOURCE, 0)).ok());
  ASSERT_TRUE(Publish(0, 5).ok());
  status = Publish(0, 4);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(status.error_message(), HasSubstr("already published version 5"));
  // Past 2^53 (what JSON carries exactly) a version is refused here, naming the limit, and
  // the rank can still publish the next good one.
  status = Publish(0, (int64_t{1} << 53) + 1);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(),
              HasSubstr("source rank 0's version 9007199254740993 is not a version: versions are "
                        "1 to 2^53"));
  ASSERT_TRUE(Publish(0, 6).ok());
  ASSERT_TRUE(Deregister(v1::ROLE_SOURCE, 0).ok());
}

TEST_F(LocalApiTest, WaitForVersionWithoutADeadlineOrOnAnUnknownRankIsRefused) {
  grpc::ClientContext context;  // no gRPC deadline either
  v1::WaitForVersionRequest request;
  request.set_rank(0);
  request.set_version(1);
  v1::WaitForVersionResponse response;
  EXPECT_EQ(local_->WaitForVersion(&context, request, &response).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  const grpc::Status unknown = WaitForVersion(42, 1, 100);
  EXPECT_EQ(unknown.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(unknown.error_message(), HasSubstr("destination rank 42"));
}

TEST_F(LocalApiTest, ThreeHundredCancelledWaitsLeaveNoThreadBehind) {
  ASSERT_TRUE(Register(GoodRequest(v1::ROLE_DESTINATION, 0)).ok());
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::thread> waiters;
  std::atomic<int> cancelled{0};
  for (int i = 0; i < 300; ++i) contexts.push_back(std::make_unique<grpc::ClientContext>());
  for (int i = 0; i < 300; ++i) {
    waiters.emplace_back([&, i]() {
      v1::WaitForVersionRequest request;
      request.set_rank(0);
      request.set_version(1 << 30);
      request.set_deadline_ms(int64_t{1} << 40);  // decades
      v1::WaitForVersionResponse response;
      if (local_->WaitForVersion(contexts[i].get(), request, &response).error_code() ==
          grpc::StatusCode::CANCELLED) {
        ++cancelled;
      }
    });
  }
  absl::SleepFor(absl::Milliseconds(500));
  for (auto& context : contexts) context->TryCancel();
  for (std::thread& t : waiters) t.join();
  EXPECT_EQ(cancelled.load(), 300);
  EXPECT_TRUE(ThreadsSettle());
  ASSERT_TRUE(Deregister(v1::ROLE_DESTINATION, 0).ok());
}

}  // namespace
}  // namespace refit::testing

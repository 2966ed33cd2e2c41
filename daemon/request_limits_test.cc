// Registration limits: a real-sized request passes; each oversized field is refused with
// the rank, the field and the limit named.
#include "daemon/request_limits.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "planner/testing/layout_builder.h"

namespace refit::daemon {
namespace {

class RequestLimitsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    refit::testing::LayoutBuilder builder;
    builder.Tensor("w", {16, 8}).Rank(3, "node", 0).View(3, "w", {0, 0}, {4, 8});
    spec_ = builder.spec();
    layout_ = spec_.ranks(0);
  }
  absl::Status Check(const RegistrationLimits& limits = {}) {
    return CheckRegistrationLimits(v1::ROLE_SOURCE, layout_, spec_.tensors(), limits);
  }
  void ExpectRefused(const std::string& says, const RegistrationLimits& limits = {}) {
    const absl::Status status = Check(limits);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), "source rank 3")) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), says)) << status;
  }

  v1::LayoutSpec spec_;
  v1::RankLayout layout_;
};

TEST_F(RequestLimitsTest, AnOrdinaryRegistrationPasses) { EXPECT_TRUE(Check().ok()); }

TEST_F(RequestLimitsTest, EachLimitIsNamed) {
  RegistrationLimits small;
  small.max_views = 0;
  ExpectRefused("1 views; the limit is 0", small);
  small = {};
  small.max_rank = 2;
  ExpectRefused("a rank is between 0 and 2", small);
  layout_.set_host(std::string(300, 'h'));
  ExpectRefused("host name of 300 bytes; the limit is 256");
  layout_.set_host("node");
  layout_.mutable_views(0)->set_tensor(std::string("w\0x", 3));
  ExpectRefused("view tensor name contains a NUL byte");
  layout_.mutable_views(0)->set_tensor("w");
  for (int d = 0; d < 9; ++d) layout_.mutable_views(0)->add_strides(1);
  ExpectRefused("9 dims in view 0; the limit is 8");
}

}  // namespace
}  // namespace refit::daemon

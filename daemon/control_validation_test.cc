// Hostile hellos and versions are refused with the field and the rule named.
#include "daemon/control_validation.h"

#include <string>

#include "gtest/gtest.h"
#include "transport/data_plane_address.h"

namespace refit::daemon {
namespace {

v1::DaemonHello GoodHello() {
  v1::DaemonHello hello;
  hello.set_node("infer-node-0.cluster.local");
  hello.set_incarnation("5f3a9c01e2b4d6f8-4242");
  hello.set_gpu("8 x NVIDIA H200, driver 13.0");
  hello.set_committed_version(-1);
  hello.set_data_plane_address(transport::SealDataPlaneAddress("ucx address bytes"));
  return hello;
}

void ExpectRefused(const v1::DaemonHello& hello, const std::string& fragment) {
  const absl::Status status = CheckHello(hello);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << fragment;
  EXPECT_NE(status.message().find(fragment), std::string::npos) << status;
}

TEST(ControlValidationTest, AWellFormedHelloIsAccepted) {
  EXPECT_TRUE(CheckHello(GoodHello()).ok()) << CheckHello(GoodHello());
  v1::DaemonHello committed = GoodHello();
  committed.set_committed_version(kMaxVersion);
  EXPECT_TRUE(CheckHello(committed).ok());
}

TEST(ControlValidationTest, NodeNamesAreBoundedAndCannotForgeLogLines) {
  v1::DaemonHello hello = GoodHello();
  hello.set_node("");
  ExpectRefused(hello, "node name of 0 bytes");
  hello.set_node(std::string(10 << 20, 'n'));
  ExpectRefused(hello, "node name of 10485760 bytes");
  hello.set_node("infer-node-0\n[info] epoch committed");
  ExpectRefused(hello, "holds the character 0xa");
  hello.set_node("node\x1b[31m");
  ExpectRefused(hello, "holds the character 0x1b");
  hello = GoodHello();
  hello.set_incarnation("x y");
  ExpectRefused(hello, "incarnation");
  hello = GoodHello();
  hello.set_gpu(std::string(2000, 'g'));
  ExpectRefused(hello, "GPU description of 2000 bytes");
  hello.set_gpu("H200\r\n");
  ExpectRefused(hello, "not printable");
}

TEST(ControlValidationTest, AClaimedVersionOutsideTheRangeIsRefused) {
  v1::DaemonHello hello = GoodHello();
  hello.set_committed_version(int64_t{1} << 62);
  ExpectRefused(hello, "committed version 4611686018427387904 is not a version");
  hello.set_committed_version(-7);
  ExpectRefused(hello, "committed version -7");
  EXPECT_EQ(CheckVersion(0, "Refit: version").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckVersion(-1, "Refit: version").message(),
            "Refit: version -1 is not a version: versions are 1 to 2^53");
  EXPECT_TRUE(CheckVersion(1, "v").ok());
}

TEST(ControlValidationTest, AGarbageDataPlaneAddressIsRefusedAtTheHello) {
  v1::DaemonHello hello = GoodHello();
  hello.set_data_plane_address(std::string(300, '\xee'));
  ExpectRefused(hello, "is not a refit UCX address");
  hello.set_data_plane_address("");
  ExpectRefused(hello, "the hello of refitd on infer-node-0.cluster.local");
}

TEST(ControlValidationTest, AnEpochInDoubtIsNamedBoundedAndOfARealVersion) {
  v1::DaemonHello hello = GoodHello();
  hello.set_committed_epoch_id("job-6");
  hello.mutable_in_doubt()->set_epoch_id("job-7");
  hello.mutable_in_doubt()->set_version(7);
  hello.mutable_in_doubt()->add_destination_nodes("infer-0");
  EXPECT_TRUE(CheckHello(hello).ok()) << CheckHello(hello);

  v1::DaemonHello bad = hello;
  bad.set_committed_epoch_id("job-6\nforged line");
  ExpectRefused(bad, "committed epoch");
  bad = hello;
  bad.mutable_in_doubt()->set_version(0);
  ExpectRefused(bad, "the epoch in doubt's version 0 is not a version");
  bad = hello;
  bad.mutable_in_doubt()->add_destination_nodes("");
  ExpectRefused(bad, "the epoch in doubt's destination node of 0 bytes");
  bad = hello;
  for (int i = 0; i < 4097; ++i) bad.mutable_in_doubt()->add_destination_nodes("n");
  ExpectRefused(bad, "names 4098 nodes (at most 4096)");
  bad = hello;
  bad.mutable_in_doubt()->clear_epoch_id();
  ExpectRefused(bad, "an epoch in doubt without an epoch id");
}

}  // namespace
}  // namespace refit::daemon

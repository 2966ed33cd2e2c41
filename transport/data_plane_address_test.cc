// A daemon's data-plane address is checked before UCX parses it: garbage, truncated,
// corrupted or oversized addresses are refused with a reason.
#include "transport/data_plane_address.h"

#include <string>

#include "gtest/gtest.h"

namespace refit::transport {
namespace {

void ExpectRefused(const std::string& sealed, const std::string& fragment) {
  absl::StatusOr<std::string> opened = OpenDataPlaneAddress(sealed);
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(opened.status().message().find(fragment), std::string::npos) << opened.status();
}

TEST(DataPlaneAddressTest, ASealedAddressOpensToItsBytes) {
  const std::string ucx("\x00\x01ucx worker address\xff", 22);
  absl::StatusOr<std::string> opened = OpenDataPlaneAddress(SealDataPlaneAddress(ucx));
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ(*opened, ucx);
}

TEST(DataPlaneAddressTest, GarbageTruncatedCorruptAndOversizedAddressesAreRefused) {
  const std::string sealed = SealDataPlaneAddress(std::string(300, 'u'));
  ExpectRefused("", "is not a refit UCX address");
  ExpectRefused(std::string(4096, '\xab'), "is not a refit UCX address");
  ExpectRefused(sealed.substr(0, sealed.size() - 1), "300 bytes of UCX address but 299 follow");
  std::string corrupt = sealed;
  corrupt.back() ^= 1;
  ExpectRefused(corrupt, "corrupt");
  ExpectRefused(SealDataPlaneAddress(std::string(kMaxUcxAddressBytes + 1, 'u')), "at most");
  ExpectRefused(SealDataPlaneAddress(""), "holds 0 bytes");
}

}  // namespace
}  // namespace refit::transport

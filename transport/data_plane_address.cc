#include "transport/data_plane_address.h"

#include <cstdint>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "xxhash.h"

namespace refit::transport {
namespace {

constexpr std::string_view kMagic = "refit-ucx/1";
constexpr size_t kHeaderBytes = kMagic.size() + sizeof(uint32_t) + sizeof(uint64_t);

}  // namespace

std::string SealDataPlaneAddress(std::string_view ucx_address) {
  const uint32_t length = static_cast<uint32_t>(ucx_address.size());
  const uint64_t hash = XXH3_64bits(ucx_address.data(), ucx_address.size());
  std::string sealed(kMagic);
  sealed.append(reinterpret_cast<const char*>(&length), sizeof(length));
  sealed.append(reinterpret_cast<const char*>(&hash), sizeof(hash));
  sealed.append(ucx_address);
  return sealed;
}

absl::StatusOr<std::string> OpenDataPlaneAddress(std::string_view sealed) {
  if (sealed.size() < kHeaderBytes || sealed.substr(0, kMagic.size()) != kMagic) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the data-plane address (", sealed.size(), " bytes) is not a refit UCX address"));
  }
  uint32_t length = 0;
  uint64_t hash = 0;
  std::memcpy(&length, sealed.data() + kMagic.size(), sizeof(length));
  std::memcpy(&hash, sealed.data() + kMagic.size() + sizeof(length), sizeof(hash));
  const std::string_view ucx = sealed.substr(kHeaderBytes);
  if (length == 0 || length > kMaxUcxAddressBytes || length != ucx.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the data-plane address says it holds ", length, " bytes of UCX address but ",
                     ucx.size(), " follow (at most ", kMaxUcxAddressBytes, ")"));
  }
  if (XXH3_64bits(ucx.data(), ucx.size()) != hash) {
    return absl::InvalidArgumentError("the data-plane address is corrupt (its checksum differs)");
  }
  return std::string(ucx);
}

}  // namespace refit::transport

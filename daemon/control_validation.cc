#include "daemon/control_validation.h"

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "transport/data_plane_address.h"

namespace refit::daemon {
namespace {

constexpr size_t kMaxNameBytes = 253;
constexpr size_t kMaxGpuDescriptionBytes = 1024;

bool NameCharacter(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-' ||
         c == ':' || c == '@';
}

}  // namespace

absl::Status CheckVersion(int64_t version, const std::string& what) {
  if (version >= 1 && version <= kMaxVersion) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(what, " ", version,
                                                 " is not a version: versions are 1 to 2^53"));
}

absl::Status CheckNodeName(const std::string& name, const std::string& what) {
  if (name.empty() || name.size() > kMaxNameBytes) {
    return absl::InvalidArgumentError(absl::StrCat(what, " of ", name.size(),
                                                   " bytes: a name has 1 to ", kMaxNameBytes));
  }
  for (char c : name) {
    if (!NameCharacter(c)) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, " \"", absl::CHexEscape(name.substr(0, 64)), "\" holds the character 0x",
          absl::Hex(static_cast<unsigned char>(c)),
          ": names are letters, digits and . _ - : @"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckHello(const v1::DaemonHello& hello) {
  if (absl::Status node = CheckNodeName(hello.node(), "the hello's node name"); !node.ok()) {
    return node;
  }
  const std::string who = absl::StrCat("the hello of refitd on ", hello.node());
  if (!hello.incarnation().empty()) {
    absl::Status incarnation =
        CheckNodeName(hello.incarnation(), absl::StrCat(who, ": incarnation"));
    if (!incarnation.ok()) return incarnation;
  }
  if (hello.gpu().size() > kMaxGpuDescriptionBytes) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": a GPU description of ",
                                                   hello.gpu().size(), " bytes (at most ",
                                                   kMaxGpuDescriptionBytes, ")"));
  }
  for (char c : hello.gpu()) {
    if (c < 0x20 || c > 0x7e) {
      return absl::InvalidArgumentError(
          absl::StrCat(who, ": the GPU description holds a character that is not printable"));
    }
  }
  // -1 (and proto's default 0): nothing committed yet.
  if (hello.committed_version() < -1 || hello.committed_version() > 0) {
    absl::Status version =
        CheckVersion(hello.committed_version(), absl::StrCat(who, ": committed version"));
    if (!version.ok()) return version;
  }
  absl::StatusOr<std::string> address =
      transport::OpenDataPlaneAddress(hello.data_plane_address());
  if (!address.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": ", address.status().message()));
  }
  return absl::OkStatus();
}

}  // namespace refit::daemon

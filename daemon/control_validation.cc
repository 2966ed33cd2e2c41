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

// An epoch in doubt names itself, its version and at most this many nodes.
constexpr int kMaxInDoubtNodes = 4096;

absl::Status CheckInDoubt(const v1::InDoubtEpoch& epoch, const std::string& who) {
  if (epoch.epoch_id().empty()) {
    if (epoch.version() != 0 || epoch.destination_nodes_size() != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(who, ": an epoch in doubt without an epoch id"));
    }
    return absl::OkStatus();
  }
  const std::string what = absl::StrCat(who, ": the epoch in doubt");
  if (absl::Status id = CheckNodeName(epoch.epoch_id(), what); !id.ok()) return id;
  if (absl::Status version = CheckVersion(epoch.version(), absl::StrCat(what, "'s version"));
      !version.ok()) {
    return version;
  }
  if (epoch.destination_nodes_size() > kMaxInDoubtNodes) {
    return absl::InvalidArgumentError(absl::StrCat(what, " names ", epoch.destination_nodes_size(),
                                                   " nodes (at most ", kMaxInDoubtNodes, ")"));
  }
  for (const std::string& node : epoch.destination_nodes()) {
    if (absl::Status name = CheckNodeName(node, absl::StrCat(what, "'s destination node"));
        !name.ok()) {
      return name;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckVersion(int64_t version, const std::string& what) {
  if (version >= 1 && version <= kMaxVersion) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(what, " ", version, " is not a version: versions are 1 to 2^53"));
}

absl::Status CheckNodeName(const std::string& name, const std::string& what) {
  if (name.empty() || name.size() > kMaxNameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " of ", name.size(), " bytes: a name has 1 to ", kMaxNameBytes));
  }
  for (char c : name) {
    if (!NameCharacter(c)) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, " \"", absl::CHexEscape(name.substr(0, 64)), "\" holds the character 0x",
          absl::Hex(static_cast<unsigned char>(c)), ": names are letters, digits and . _ - : @"));
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
  if (!hello.committed_epoch_id().empty()) {
    absl::Status epoch =
        CheckNodeName(hello.committed_epoch_id(), absl::StrCat(who, ": committed epoch"));
    if (!epoch.ok()) return epoch;
  }
  if (absl::Status in_doubt = CheckInDoubt(hello.in_doubt(), who); !in_doubt.ok()) {
    return in_doubt;
  }
  absl::StatusOr<std::string> address = transport::OpenDataPlaneAddress(hello.data_plane_address());
  if (!address.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": ", address.status().message()));
  }
  return absl::OkStatus();
}

}  // namespace refit::daemon

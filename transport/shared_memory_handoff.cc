#include "transport/shared_memory_handoff.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <random>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "transport/memory_fault_guard.h"
#include "transport/page_touch.h"
#include "transport/staging_pool.h"

namespace refit::transport {
namespace {

constexpr char kMagic[4] = {'R', 'F', 'H', 'O'};
constexpr uint8_t kNoticeVersion = 1;
constexpr size_t kMaxSegmentName = 64;
constexpr char kOutboxPrefix[] = "/refit-outbox-";

}  // namespace

std::string SharedMemoryDomain() {
  std::ifstream boot_id_file("/proc/sys/kernel/random/boot_id");
  std::string boot_id;
  if (!std::getline(boot_id_file, boot_id)) return "";
  boot_id = std::string(absl::StripAsciiWhitespace(boot_id));
  struct stat shm;
  if (boot_id.empty() || stat("/dev/shm", &shm) != 0) return "";
  return absl::StrCat("boot ", boot_id, ", /dev/shm ", shm.st_dev, ":", shm.st_ino, ", uid ",
                      geteuid());
}

EncodedNotice EncodeNotice(const HandoffNotice& notice) {
  EncodedNotice encoded = {};
  uint8_t* at = encoded.data();
  std::memcpy(at, kMagic, sizeof(kMagic));
  at += sizeof(kMagic);
  *at++ = kNoticeVersion;
  const size_t length = std::min(notice.segment.size(), kMaxSegmentName);
  *at++ = static_cast<uint8_t>(length);
  std::memcpy(at, notice.segment.data(), length);
  at += kMaxSegmentName;
  std::memcpy(at, &notice.offset, sizeof(notice.offset));
  at += sizeof(notice.offset);
  std::memcpy(at, &notice.bytes, sizeof(notice.bytes));
  return encoded;
}

absl::StatusOr<HandoffNotice> DecodeNotice(const uint8_t* message, int64_t bytes) {
  if (bytes != kHandoffNoticeBytes || std::memcmp(message, kMagic, sizeof(kMagic)) != 0 ||
      message[sizeof(kMagic)] != kNoticeVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("a message of ", bytes, " bytes where a shared-memory notice (",
                     kHandoffNoticeBytes, " bytes, version ", kNoticeVersion, ") was expected"));
  }
  const uint8_t* at = message + sizeof(kMagic) + 1;
  const size_t length = *at++;
  HandoffNotice notice;
  notice.segment.assign(reinterpret_cast<const char*>(at), std::min(length, kMaxSegmentName));
  at += kMaxSegmentName;
  std::memcpy(&notice.offset, at, sizeof(notice.offset));
  at += sizeof(notice.offset);
  std::memcpy(&notice.bytes, at, sizeof(notice.bytes));
  if (length > kMaxSegmentName || !absl::StartsWith(notice.segment, kOutboxPrefix) ||
      notice.segment.find('/', 1) != std::string::npos || notice.offset < 0 || notice.bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a shared-memory notice naming \"", absl::CHexEscape(notice.segment), "\" at offset ",
        notice.offset, " for ", notice.bytes, " bytes: not a chunk of an outbox segment"));
  }
  return notice;
}

SharedMemoryOutbox::SharedMemoryOutbox()
    : prefix_(absl::StrFormat("%s%d-%08x-", kOutboxPrefix, getpid(), std::random_device{}())) {}

absl::StatusOr<std::vector<uint8_t*>> SharedMemoryOutbox::Carve(const std::vector<int64_t>& sizes) {
  for (int64_t size : sizes) {
    if (size < 0) {
      return absl::InvalidArgumentError(absl::StrCat("an outbox chunk of ", size, " bytes"));
    }
  }
  const int64_t total = StagingPool::CarvedBytes(sizes);
  if (segment_ == nullptr || segment_->bytes() < total) {
    segment_.reset();  // unlinked; a peer that mapped it keeps its mapping until it moves on
    absl::StatusOr<std::unique_ptr<SharedMemorySegment>> created =
        SharedMemorySegment::Create(absl::StrCat(prefix_, allocations_),
                                    std::max<int64_t>(total, 1), /*locked_while_alive=*/true);
    if (!created.ok()) {
      return absl::Status(created.status().code(),
                          absl::StrCat("the shared-memory outbox of ", total,
                                       " bytes: ", created.status().message()));
    }
    // Backed and in the page tables now (a full /dev/shm fails here, not in the data
    // plane), so no epoch pays the first touch.
    uint8_t* data = (*created)->data();
    const int64_t bytes = (*created)->bytes();
    absl::Status touched = GuardMemoryAccess(
        absl::StrCat("backing the shared-memory outbox \"", (*created)->name(), "\""),
        [&] { std::memset(data, 0, bytes); });
    if (!touched.ok()) return touched;
    segment_ = std::move(*created);
    ++allocations_;
  }
  std::vector<uint8_t*> carved;
  carved.reserve(sizes.size());
  uint8_t* cursor = segment_->data();
  for (int64_t size : sizes) {
    carved.push_back(cursor);
    cursor += StagingPool::AlignUp(size);
  }
  return carved;
}

std::vector<std::string> RemoveOrphanedOutboxes() {
  std::vector<std::string> removed;
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return removed;
  while (const dirent* entry = readdir(dir)) {
    const std::string name = absl::StrCat("/", entry->d_name);
    if (!absl::StartsWith(name, kOutboxPrefix) || !IsOrphan(name)) continue;
    if (UnlinkSharedMemory(name).ok()) removed.push_back(name);
  }
  closedir(dir);
  return removed;
}

HandoffNotice SharedMemoryOutbox::NoticeFor(const uint8_t* at, int64_t bytes) const {
  return {segment_->name(), at - segment_->data(), bytes};
}

absl::StatusOr<const uint8_t*> SharedMemoryInboxes::Locate(int32_t peer,
                                                           const HandoffNotice& notice) {
  std::unique_ptr<SharedMemorySegment>& mapped = mapped_[peer];
  if (mapped == nullptr || mapped->name() != notice.segment) {
    mapped.reset();
    absl::StatusOr<std::unique_ptr<SharedMemorySegment>> opened =
        SharedMemorySegment::Open(notice.segment, 1);
    if (!opened.ok()) {
      return absl::Status(
          opened.status().code(),
          absl::StrCat("daemon ", peer, "'s shared-memory outbox: ", opened.status().message(),
                       " (daemons that share /dev/shm must run as one user; or start refitd "
                       "with --shared_memory_between_daemons=false)"));
    }
    mapped = std::move(*opened);
  }
  if (notice.offset > mapped->bytes() || notice.bytes > mapped->bytes() - notice.offset) {
    return absl::OutOfRangeError(absl::StrCat("daemon ", peer, " named ", notice.bytes,
                                              " bytes at offset ", notice.offset, " of \"",
                                              notice.segment, "\", which holds ", mapped->bytes()));
  }
  return mapped->data() + notice.offset;
}

}  // namespace refit::transport

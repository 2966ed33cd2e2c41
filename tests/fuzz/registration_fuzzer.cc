// Fuzz target: a rank's registration as it arrives on refitd's local socket (a
// RegisterRankRequest in binary proto form), through the daemon's validation, buffer
// mapping and view bounds checks, then deregistered. Shared-memory names in the input
// rarely exist, so most inputs end at validation or at the mapping; the corpus holds
// requests whose layouts are valid.
#include <cstddef>
#include <cstdint>

#include "google/protobuf/stubs/logging.h"
#include "proto/refit.pb.h"
#include "refitd/rank_registry.h"

// Invalid UTF-8 in string fields is an ordinary parse failure here, not worth a log line.
static const bool kQuietProtobuf = [] {
  google::protobuf::SetLogHandler(nullptr);
  return true;
}();

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  refit::v1::RegisterRankRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  refit::daemon::RankRegistry registry("fuzz");
  if (registry.Register(request).ok()) {
    registry.Deregister(request.role(), request.layout().rank()).IgnoreError();
  }
  return 0;
}

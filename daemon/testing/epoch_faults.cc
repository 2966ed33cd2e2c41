#include "daemon/testing/epoch_faults.h"

#include <set>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "daemon/epoch_faults.h"
#include "spdlog/spdlog.h"
#include "transport/strided_copy.h"

namespace refit::daemon {
namespace {

absl::Mutex faults_mu;
// The (node, version) corruptions still to be done.
std::set<std::pair<std::string, int64_t>>& Corruptions() ABSL_EXCLUSIVE_LOCKS_REQUIRED(faults_mu) {
  static auto* corruptions = new std::set<std::pair<std::string, int64_t>>();
  return *corruptions;
}

// Flips the first byte of the first host-memory destination view; says which it changed.
std::string CorruptFirstDestinationByte(const std::vector<v1::RankRegistration>& registrations,
                                        transport::BufferMap* buffers) {
  for (const v1::RankRegistration& r : registrations) {
    if (r.role() != v1::ROLE_DESTINATION || r.layout().bucketed()) continue;
    for (int v = 0; v < r.layout().views_size(); ++v) {
      const v1::ShardView& view = r.layout().views(v);
      const transport::Dims offset(view.offset().begin(), view.offset().end());
      const transport::Dims extent(view.extent().begin(), view.extent().end());
      absl::StatusOr<transport::StridedRef> memory =
          buffers->LocateForWrite(r.role(), r.layout().rank(), v, view.tensor(), offset, extent);
      if (!memory.ok() || memory->device >= 0 || transport::HoldsNothing(extent)) continue;
      memory->base[0] ^= 0xFF;
      return absl::StrCat("destination rank ", r.layout().rank(), " view ", v, " (", view.tensor(),
                          ")");
    }
  }
  return "nothing: no destination view in host memory";
}

}  // namespace

namespace faults {

void CorruptAfterEpoch(const std::string& node, int64_t version) {
  absl::MutexLock lock(&faults_mu);
  Corruptions().insert({node, version});
}

}  // namespace faults

void AfterDataPlane(const std::string& node, const std::string& epoch_id, int64_t version,
                    const std::vector<v1::RankRegistration>& registrations,
                    transport::BufferMap* buffers) {
  {
    absl::MutexLock lock(&faults_mu);
    if (Corruptions().erase({node, version}) == 0) return;
  }
  spdlog::warn("refitd {}: test fault after epoch {}: flipped a byte of {}", node, epoch_id,
               CorruptFirstDestinationByte(registrations, buffers));
}

}  // namespace refit::daemon

#include "refitd/testing/epoch_faults.h"

#include <map>
#include <set>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "refitd/epoch_faults.h"
#include "spdlog/spdlog.h"

namespace refit::daemon {
namespace {

absl::Mutex faults_mu;
// The (node, version) corruptions still to be done.
std::set<std::pair<std::string, int64_t>>& Corruptions() ABSL_EXCLUSIVE_LOCKS_REQUIRED(faults_mu) {
  static auto* corruptions = new std::set<std::pair<std::string, int64_t>>();
  return *corruptions;
}

std::map<std::string, absl::Duration>& PreparationDelays()
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(faults_mu) {
  static auto* delays = new std::map<std::string, absl::Duration>();
  return *delays;
}

}  // namespace

namespace faults {

void SlowPreparation(const std::string& node, absl::Duration delay) {
  absl::MutexLock lock(&faults_mu);
  PreparationDelays()[node] = delay;
}

void CorruptOnTheWay(const std::string& node, int64_t version) {
  absl::MutexLock lock(&faults_mu);
  Corruptions().insert({node, version});
}

}  // namespace faults

void OnMessageReceived(const std::string& node, const std::string& epoch_id, int64_t version,
                       uint8_t* message, int64_t bytes) {
  if (bytes <= 0) return;
  {
    absl::MutexLock lock(&faults_mu);
    if (Corruptions().erase({node, version}) == 0) return;
  }
  message[0] ^= 0xFF;
  spdlog::warn("refitd {}: test fault in epoch {}: flipped the first byte of a {}-byte message",
               node, epoch_id, bytes);
}

void OnPrepare(const std::string& node) {
  absl::Duration delay;
  {
    absl::MutexLock lock(&faults_mu);
    auto it = PreparationDelays().find(node);
    if (it == PreparationDelays().end()) return;
    delay = it->second;
  }
  spdlog::warn("refitd {}: test fault: preparing {} ms longer", node,
               absl::ToInt64Milliseconds(delay));
  absl::SleepFor(delay);
}

}  // namespace refit::daemon

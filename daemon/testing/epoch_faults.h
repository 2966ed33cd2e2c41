// Faults a test switches on for the refitd links of its own process (the test-only
// definition of daemon/epoch_faults.h): after the epoch of a version, a byte of a
// destination view flipped before the checksums, so the coordinator must fail the epoch.
#ifndef REFIT_DAEMON_TESTING_EPOCH_FAULTS_H_
#define REFIT_DAEMON_TESTING_EPOCH_FAULTS_H_

#include <cstdint>
#include <string>

namespace refit::daemon::faults {

// After the epoch moving `version` on the link of `node`, flips the first byte of the first
// host-memory destination view there (once).
void CorruptAfterEpoch(const std::string& node, int64_t version);

}  // namespace refit::daemon::faults

#endif  // REFIT_DAEMON_TESTING_EPOCH_FAULTS_H_
